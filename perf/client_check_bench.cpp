// smx-client-check-bench: what SMTPS's connect-stage client check
// (smtps/client_check.hpp) costs per connection once its answers are cached,
// with and without DNSBL lists: the figure the policy axis of issue 28 asks
// for ("one DNSBL, answers cached"). It runs ClientChecks::check, as a
// session does before its greeting, for an outside client on one loopback
// connection, against a name server given on the command line:
//
//   rbldnsd -n -b 127.0.0.1/5300 -r DIR -w / bl.test:ip4set:bl &   # DIR/bl: "127.0.0.3"
//   build/perf/smx-client-check-bench 127.0.0.1:5300 bl.test [checks]
//
// The first check of each configuration fills the cache (and is not timed);
// then `checks` (default 200000) are timed in one event loop. The client is
// 127.0.0.1 (its name from the hosts file), taken as outside relay_networks;
// listed or not (then the cached answer is NXDOMAIN), as the zone says. Log
// lines are off (a listed client's rank line would be timed too).
#include "libsm/config.hpp"
#include "smtps/client_check.hpp"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

namespace {

// Nanoseconds per check, cached, for one configuration.
double per_check(asio::io_context& io, tcp::socket& sock, const smx::Config& cfg, long n) {
    smx::smtps::ClientChecks checks(io.get_executor(), cfg);
    double ns = 0;
    std::string first;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        const auto v = co_await checks.check(cfg, sock, "127.0.0.1", false);
        first = v.refusal.empty() ? "accepted" : v.refusal;
        const auto t0 = std::chrono::steady_clock::now();
        for (long i = 0; i < n; ++i) co_await checks.check(cfg, sock, "127.0.0.1", false);
        ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
    }, [](std::exception_ptr e) { if (e) std::rethrow_exception(e); });
    io.restart();
    io.run();
    std::printf("  first check: %s\n", first.c_str());
    return ns;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s DNS_SERVER ZONE [checks]\n", argv[0]);
        return 2;
    }
    const long n = argc > 3 ? std::atol(argv[3]) : 200000;
    spdlog::set_level(spdlog::level::off);
    asio::io_context io;
    tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
    tcp::socket client(io), server(io);
    client.connect(acc.local_endpoint());
    acc.accept(server);

    smx::Config cfg = smx::load_config("");
    cfg.client.dns_servers = {argv[1]};
    struct Row {
        const char* what;
        bool names;
        bool dnsbl;
    };
    for (const Row& r : {Row{"nothing (no lookups)", false, false}, Row{"client name", true, false},
                         Row{"one DNSBL", false, true}, Row{"client name + one DNSBL", true, true}}) {
        cfg.policy.client_name_lookup = r.names;
        cfg.dnsbl.sites.clear();
        if (r.dnsbl) cfg.dnsbl.sites.push_back(smx::parse_dnsbl_site("dnsbl.sites", argv[2]));
        std::printf("%s:\n", r.what);
        const double ns = per_check(io, server, cfg, n);
        std::printf("  %.0f ns per connection (%ld checks)\n", ns, n);
    }
    return 0;
}
