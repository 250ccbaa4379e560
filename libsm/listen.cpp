#include "libsm/listen.hpp"

#include <netdb.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>

namespace smx {

namespace {

// A socket bound to ai, not yet listening; -1 with errno.
int bound_socket(const addrinfo& ai, bool reuseport) {
    const int fd = ::socket(ai.ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
    if (reuseport) ::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on);
    // "[::]:25" next to "0.0.0.0:25" must not collide.
    if (ai.ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
    if (::bind(fd, ai.ai_addr, ai.ai_addrlen) != 0) {
        const int saved = errno;
        ::close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

} // namespace

unsigned event_loops(unsigned configured) {
    if (configured != 0) return configured;
    cpu_set_t set;
    CPU_ZERO(&set);
    const int n = ::sched_getaffinity(0, sizeof set, &set) == 0
                      ? CPU_COUNT(&set)
                      : static_cast<int>(std::thread::hardware_concurrency());
    return static_cast<unsigned>(std::clamp(n / 2, 1, 64));
}

bool listen_all(const std::vector<HostPort>& addrs, unsigned loops, std::vector<int>& fds,
                std::string& err) {
    std::vector<std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)>> resolved;
    for (const auto& hp : addrs) {
        addrinfo hints{};
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | (hp.literal ? AI_NUMERICHOST : 0);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const std::string port = std::to_string(hp.port);
        if (const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res)) {
            err = "cannot listen on " + hp.str() + ": " + ::gai_strerror(rc);
            return false;
        }
        resolved.emplace_back(res, ::freeaddrinfo);
        // First a socket without SO_REUSEPORT: it fails where anyone listens
        // already, which a reuseport socket of the same user would join
        // without a word (a second smx run on the port would take half of
        // its connections).
        const int probe = bound_socket(*res, false);
        if (probe < 0) {
            err = "cannot listen on " + hp.str() + ": " + std::strerror(errno);
            return false;
        }
        ::close(probe);
    }
    for (unsigned loop = 0; loop < loops; ++loop) {
        for (std::size_t a = 0; a < addrs.size(); ++a) {
            const int fd = bound_socket(*resolved[a], true);
            if (fd >= 0) fds.push_back(fd);
            if (fd < 0 || ::listen(fd, 1024) != 0) {
                err = "cannot listen on " + addrs[a].str() + ": " + std::strerror(errno);
                return false;
            }
        }
    }
    return true;
}

} // namespace smx
