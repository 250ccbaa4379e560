// Next-hop resolution for SMTPC: turns a DELIVER nexthop ("[host]:port",
// "host:port" or "mx") into the server addresses to try, in order. DNS goes
// through c-ares on the process's io_context, cached by TTL; concurrent
// lookups of one name share a single query.
#pragma once

#include "libsm/config.hpp"

#include <ares.h>
#include <boost/asio.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::smtpc {

namespace asio = boost::asio;

// One server address to try, with the name it was found under.
struct Target {
    std::string host;  // MX host or nexthop host (the literal for [addr])
    asio::ip::tcp::endpoint ep;
    std::string relay() const;  // "host[ip]:port", as in the logs
};

// A failure that applies to every recipient of a delivery.
struct Failure {
    unsigned code = 451;
    std::string enhanced = "4.4.3";
    std::string text;
    bool temporary() const { return code / 100 == 4; }
};

// Of the failures met while trying the hosts and next hops of one delivery,
// keeps the one that decides it: a temporary failure outranks every
// permanent one, earlier or later (postfix: "a soft error dominates past and
// future hard errors"), so that one host's definite answer never bounces
// mail that another host, now out of reach, may still take; otherwise the
// latest. kept is empty until the first failure.
void keep_failure(std::optional<Failure>& kept, Failure f);

struct Targets {
    std::vector<Target> list;  // empty: err says why
    Failure err;
};

class Resolver {
public:
    explicit Resolver(asio::any_io_executor ex);
    ~Resolver();
    Resolver(const Resolver&) = delete;
    Resolver& operator=(const Resolver&) = delete;

    // Overrides the name servers of /etc/resolv.conf ("127.0.0.1:5353,...").
    bool set_servers(const std::string& csv);
    // Takes [client] dns_servers and smtp_port, and who we are for loop
    // detection: server.hostname and the listen addresses (a wildcard listen
    // address stands for every interface address). False: bad dns_servers.
    bool configure(const smx::Config& cfg);

    // The addresses to try for one nexthop of a DELIVER; rcpt_domain is the
    // recipients' domain, used by "mx".
    asio::awaitable<Targets> targets(const std::string& nexthop,
                                     const std::string& rcpt_domain);

    enum class Kind { mx, addr };
    struct Answer {
        int status = ARES_SUCCESS;  // ares status of the lookup
        std::vector<std::pair<unsigned, std::string>> mx;  // preference, host
        std::vector<asio::ip::address> addrs;
        std::chrono::steady_clock::time_point expires;
    };
    // One cached lookup (MX or A+AAAA of a name).
    asio::awaitable<Answer> lookup(Kind kind, const std::string& name);

private:
    struct Pending {
        explicit Pending(asio::any_io_executor ex) : wake(ex) {
            wake.expires_at(asio::steady_timer::time_point::max());
        }
        asio::steady_timer wake;
        bool done = false;
        Answer answer;
    };
    struct Query {
        Resolver* self;
        std::string key;
        std::shared_ptr<Pending> pending;
    };
    struct Watch;

    // What a name looked up is: the domain mail goes to (the recipient
    // domain, or a route's host:port, when it has no MX), or a host named as
    // one (an MX host, a route's [host]). Its NXDOMAIN is 5.1.2 (bad
    // destination system) or 5.4.4 (unable to route) respectively.
    enum class Role { domain, host };
    asio::awaitable<Targets> addresses(const std::string& host, std::uint16_t port, Role role);
    asio::awaitable<Targets> mx_targets(const std::string& domain, std::uint16_t port);
    bool is_self(const std::string& host, const std::vector<Target>& addrs) const;
    void finish(Query& q, Answer a, std::uint32_t ttl);
    static void on_mx(void* arg, int status, int timeouts, unsigned char* abuf, int alen);
    static void on_addr(void* arg, int status, int timeouts, struct ares_addrinfo* res);
    static void on_sock_state(void* data, ares_socket_t fd, int readable, int writable);
    void arm(const std::shared_ptr<Watch>& w);
    void wait(const std::shared_ptr<Watch>& w, asio::posix::descriptor_base::wait_type type,
              bool Watch::*busy);
    void arm_timer();

    asio::any_io_executor ex_;
    ares_channel chan_ = nullptr;
    asio::steady_timer timer_;
    std::map<ares_socket_t, std::shared_ptr<Watch>> watches_;
    std::unordered_map<std::string, Answer> cache_;
    std::unordered_map<std::string, std::shared_ptr<Pending>> pending_;
    std::uint16_t smtp_port_ = 25;
    std::string hostname_;                       // lower case; empty: no name check
    std::vector<asio::ip::address> self_addrs_;  // our addresses (loop detection)
};

// The minimum TTL of the answer records of a DNS response; 0 when none.
std::uint32_t answer_ttl(const unsigned char* abuf, int alen);

} // namespace smx::smtpc
