// smx::listen_all and smx::event_loops on real sockets: the fds come loop by
// loop, every socket of an address is in one SO_REUSEPORT group that the
// kernel spreads connections over, and an address someone already listens
// on is refused instead of joined.
#include "libsm/listen.hpp"

#include <catch2/catch.hpp>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>

using namespace smx;

namespace {

struct Fds {
    std::vector<int> v;
    ~Fds() {
        for (int fd : v) ::close(fd);
    }
};

std::uint16_t free_port(int family) {
    const int fd = ::socket(family, SOCK_STREAM, 0);
    sockaddr_storage ss{};
    socklen_t len = family == AF_INET ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
    ss.ss_family = static_cast<sa_family_t>(family);
    if (family == AF_INET)
        reinterpret_cast<sockaddr_in&>(ss).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    else
        reinterpret_cast<sockaddr_in6&>(ss).sin6_addr = in6addr_loopback;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    ::close(fd);
    return ntohs(family == AF_INET ? reinterpret_cast<sockaddr_in&>(ss).sin_port
                                   : reinterpret_cast<sockaddr_in6&>(ss).sin6_port);
}

std::pair<int, std::uint16_t> local(int fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0);
    const auto port = ss.ss_family == AF_INET ? reinterpret_cast<sockaddr_in&>(ss).sin_port
                                              : reinterpret_cast<sockaddr_in6&>(ss).sin6_port;
    return {ss.ss_family, ntohs(port)};
}

int option(int fd, int level, int name) {
    int v = 0;
    socklen_t len = sizeof v;
    REQUIRE(::getsockopt(fd, level, name, &v, &len) == 0);
    return v;
}

bool have_ipv6_loopback() {
    std::ifstream f("/proc/net/if_inet6");
    for (std::string line; std::getline(f, line);)
        if (line.rfind("00000000000000000000000000000001", 0) == 0) return true;
    return false;
}

} // namespace

TEST_CASE("listen_all binds every address once per loop, loop by loop") {
    std::vector<HostPort> addrs{{"127.0.0.1", free_port(AF_INET), true}};
    const bool v6 = have_ipv6_loopback();
    if (v6) addrs.push_back({"::1", free_port(AF_INET6), true});
    else WARN("no ::1 here: the IPv6 address is not tested");
    Fds fds;
    std::string err;
    REQUIRE(listen_all(addrs, 3, fds.v, err));
    REQUIRE(fds.v.size() == 3 * addrs.size());
    for (std::size_t loop = 0; loop < 3; ++loop) {
        for (std::size_t a = 0; a < addrs.size(); ++a) {
            const int fd = fds.v[loop * addrs.size() + a];
            CHECK(local(fd) == std::pair<int, std::uint16_t>(a ? AF_INET6 : AF_INET,
                                                            addrs[a].port));
            CHECK(option(fd, SOL_SOCKET, SO_REUSEPORT) == 1);
            CHECK(option(fd, SOL_SOCKET, SO_ACCEPTCONN) == 1);
            if (a) CHECK(option(fd, IPPROTO_IPV6, IPV6_V6ONLY) == 1);
        }
    }
}

TEST_CASE("the kernel spreads connections over the sockets of an address") {
    const std::vector<HostPort> addrs{{"127.0.0.1", free_port(AF_INET), true}};
    Fds fds, clients;
    std::string err;
    REQUIRE(listen_all(addrs, 3, fds.v, err));
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(addrs[0].port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    // Each from its own source port: the hash that picks the socket covers it.
    for (int i = 0; i < 60; ++i) {
        const int c = ::socket(AF_INET, SOCK_STREAM, 0);
        clients.v.push_back(c);
        REQUIRE(::connect(c, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0);
    }
    unsigned total = 0;
    for (int fd : fds.v) {
        REQUIRE(::fcntl(fd, F_SETFL, O_NONBLOCK) == 0);
        unsigned n = 0;
        for (int s; (s = ::accept4(fd, nullptr, nullptr, SOCK_NONBLOCK)) >= 0; ++n) ::close(s);
        // Binomial(60, 1/3) below 5: about 1e-6.
        CHECK(n >= 5);
        total += n;
    }
    CHECK(total == 60);
}

TEST_CASE("listen_all refuses an address someone listens on instead of joining its group") {
    const std::vector<HostPort> addrs{{"127.0.0.1", free_port(AF_INET), true}};
    Fds first, second;
    std::string err;
    REQUIRE(listen_all(addrs, 2, first.v, err));
    // Same user, SO_REUSEPORT: the kernel would let a second group member in.
    CHECK_FALSE(listen_all(addrs, 2, second.v, err));
    CHECK(err == "cannot listen on " + addrs[0].str() + ": Address already in use");
    CHECK(second.v.empty());
}

TEST_CASE("event_loops: as configured, or 0 for one per two CPUs of the affinity mask") {
    CHECK(event_loops(1) == 1);
    CHECK(event_loops(7) == 7);
    cpu_set_t set;
    CPU_ZERO(&set);
    REQUIRE(::sched_getaffinity(0, sizeof set, &set) == 0);
    CHECK(event_loops(0) == static_cast<unsigned>(std::clamp(CPU_COUNT(&set) / 2, 1, 64)));
}
