#include "startup.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace smx {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

} // namespace

PidLock::~PidLock() {
    if (fd_ < 0) return;
    // Unlink while still holding the lock: a new smx run can not lock the
    // old inode in between.
    ::unlink(path_.c_str());
    ::close(fd_);
}

bool PidLock::acquire(const std::string& path, std::string& err) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno == ELOOP ? path + " is a symbolic link; refusing to follow it (remove it)"
                             : "cannot open " + path + ": " + errno_text();
        return false;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != ::geteuid()) {
        err = path + " is not a regular file of ours with one link; refusing to use it "
                     "(remove it)";
        ::close(fd);
        return false;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const bool busy = errno == EWOULDBLOCK;
        err = busy ? "another smx run is using " + fs::path(path).parent_path().string()
                   : "cannot lock " + path + ": " + errno_text();
        char buf[32] = {};
        if (busy && ::read(fd, buf, sizeof buf - 1) > 0)
            err += " (pid " + std::string(buf, std::strcspn(buf, "\n")) + ")";
        ::close(fd);
        return false;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
        err = "cannot write " + path + ": " + errno_text();
        ::close(fd);
        return false;
    }
    path_ = path;
    fd_ = fd;
    return true;
}

Listeners::~Listeners() {
    for (int fd : fds_) ::close(fd);
}

bool Listeners::open(const std::vector<sm::HostPort>& addrs, std::string& err) {
    for (const auto& hp : addrs) {
        const std::string where = "cannot listen on " + hp.str() + ": ";
        addrinfo hints{};
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | (hp.literal ? AI_NUMERICHOST : 0);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const std::string port = std::to_string(hp.port);
        if (const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res)) {
            err = where + ::gai_strerror(rc);
            return false;
        }
        std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
        const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = where + errno_text();
            return false;
        }
        fds_.push_back(fd);
        const int on = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        // "[::]:25" next to "0.0.0.0:25" must not collide.
        if (res->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
        if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
            err = where + errno_text();
            return false;
        }
    }
    return true;
}

} // namespace smx
