// Next-hop resolution for SMTPC: turns a DELIVER nexthop ("[host]:port",
// "host:port" or "mx") into the server addresses to try, in order. DNS goes
// through libsm's c-ares resolver on the process's io_context.
#pragma once

#include "libsm/config.hpp"
#include "libsm/dns_resolver.hpp"

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
    explicit Resolver(asio::any_io_executor ex) : dns_(std::move(ex)) {}

    // Overrides the name servers of /etc/resolv.conf ("127.0.0.1:5353,...").
    bool set_servers(const std::string& csv) { return dns_.set_servers(csv); }
    // Takes [client] dns_servers and smtp_port, and who we are for loop
    // detection: server.hostname and the listen addresses (a wildcard listen
    // address stands for every interface address). False: bad dns_servers.
    bool configure(const smx::Config& cfg);

    // The addresses to try for one nexthop of a DELIVER; rcpt_domain is the
    // recipients' domain, used by "mx".
    asio::awaitable<Targets> targets(const std::string& nexthop,
                                     const std::string& rcpt_domain);

private:
    // What a name looked up is: the domain mail goes to (the recipient
    // domain, or a route's host:port, when it has no MX), or a host named as
    // one (an MX host, a route's [host]). Its NXDOMAIN is 5.1.2 (bad
    // destination system) or 5.4.4 (unable to route) respectively.
    enum class Role { domain, host };
    asio::awaitable<Targets> addresses(const std::string& host, std::uint16_t port, Role role);
    asio::awaitable<Targets> mx_targets(const std::string& domain, std::uint16_t port);
    bool is_self(const std::string& host, const std::vector<Target>& addrs) const;

    smx::dns::Resolver dns_;
    std::uint16_t smtp_port_ = 25;
    std::string hostname_;                       // lower case; empty: no name check
    std::vector<asio::ip::address> self_addrs_;  // our addresses (loop detection)
};

} // namespace smx::smtpc
