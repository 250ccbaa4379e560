// What SMTPS asks about a client before it greets it (issue 28, items 6 and
// 7): its name (PTR, confirmed by an address lookup of that name, as
// postfix's "name[ip]"), its DNSBL/DNSWL score (postscreen's
// postscreen_dnsbl_sites), and whether it talked before the greeting
// (postscreen's pregreet test). The lookups of all lists and of the name run
// at the same time, each under its deadline, so the greeting waits at most
// for the slowest answer or deadline (and pregreet_wait). A lookup that times
// out or fails counts as not listed, or as no name.
#pragma once

#include "libsm/config.hpp"
#include "libsm/dns_resolver.hpp"
#include "libsm/rejections.hpp"

#include <boost/asio.hpp>

#include <string>

namespace smx::smtps {

struct ClientVerdict {
    std::string name = "unknown";  // the confirmed name, or "unknown"
    // A refusal of the client; empty: none. close: say it instead of the
    // greeting and hang up (pregreet); at_rcpt: say it to each RCPT
    // (policy.delay_reject); else: to every command but QUIT.
    std::string refusal;
    smx::Rejection why = smx::Rejection::dnsbl;
    bool close = false;
    bool at_rcpt = false;
};

// One per event loop: its resolver and its cache.
class ClientChecks {
public:
    // DNS servers from client.dns_servers (empty: /etc/resolv.conf).
    ClientChecks(boost::asio::any_io_executor ex, const smx::Config& cfg);

    // trusted: relay_networks, exempt from the DNSBL and pregreet checks
    // and from reject_unknown_client_hostname (postscreen and smtpd's
    // permit_mynetworks first).
    boost::asio::awaitable<ClientVerdict> check(const smx::Config& cfg,
                                                boost::asio::ip::tcp::socket& sock,
                                                const std::string& ip, bool trusted);

private:
    // The client's confirmed name, or "unknown"; temporary: the lookup
    // failed for now (the refusal is then 450, else 550).
    struct Name {
        std::string name = "unknown";
        bool temporary = false;
    };
    boost::asio::awaitable<Name> name_of(const std::string& ip, smx::dns::Resolver::Lookup ptr,
                                         smx::dns::Clock::time_point deadline);

    smx::dns::Resolver dns_;
};

} // namespace smx::smtps
