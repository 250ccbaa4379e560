// dnsbl.sites entries (postscreen_dnsbl_sites syntax), their filters and
// query names; the dnsbl and policy keys; and the resolver's deadline
// against a name server that never answers.
#include "libsm/config.hpp"
#include "libsm/config_keys.hpp"
#include "libsm/dns_resolver.hpp"
#include "libsm/dnsbl_site.hpp"

#include <boost/asio.hpp>
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

namespace {

std::uint32_t v4(const char* s) { return boost::asio::ip::make_address_v4(s).to_uint(); }

smx::Config load(const std::string& text) {
    const auto path = std::filesystem::temp_directory_path() / "smx-dnsbl-test.toml";
    std::ofstream(path) << text;
    auto c = smx::load_config(path.string());
    std::filesystem::remove(path);
    return c;
}

} // namespace

TEST_CASE("a DNSBL site: zone, filter and weight", "[dnsbl]") {
    auto s = smx::parse_dnsbl_site("k", "Zen.Spamhaus.org");
    CHECK(s.zone == "zen.spamhaus.org");
    CHECK(s.weight == 1);
    CHECK(s.filter.empty());
    CHECK(s.matches(v4("127.0.0.2")));
    CHECK(s.matches(v4("10.1.2.3")));  // no filter: every answer counts

    s = smx::parse_dnsbl_site("k", "bl.test.=127.0.0.2*3");
    CHECK(s.zone == "bl.test");
    CHECK(s.weight == 3);
    CHECK(s.matches(v4("127.0.0.2")));
    CHECK_FALSE(s.matches(v4("127.0.0.3")));

    s = smx::parse_dnsbl_site("k", "wl.test=127.0.[0..255].[2..4;10]*-5");
    CHECK(s.weight == -5);
    CHECK(s.matches(v4("127.0.9.2")));
    CHECK(s.matches(v4("127.0.255.4")));
    CHECK(s.matches(v4("127.0.0.10")));
    CHECK_FALSE(s.matches(v4("127.0.0.5")));
    CHECK_FALSE(s.matches(v4("127.1.0.2")));
    CHECK(s.text == "wl.test=127.0.[0..255].[2..4;10]*-5");
}

TEST_CASE("a bad DNSBL site is a config error naming the key", "[dnsbl]") {
    for (const char* bad : {"", "*2", "bl.test*", "bl.test*x", "bl.test=127.0.0", "bl.test=127.0.0.2.1",
                            "bl.test=127.0.0.256", "bl.test=127.0.0.[4..2]", "bl.test=127.0.0.[]",
                            "bl..test", "bl test", "bl.test=127.0.0.[2..3", "bl.test*99999999"}) {
        INFO(bad);
        CHECK_THROWS_AS(smx::parse_dnsbl_site("dnsbl.sites", bad), smx::ConfigError);
    }
}

TEST_CASE("DNSBL query names: reversed IPv4 octets, IPv6 nibbles", "[dnsbl]") {
    const auto s = smx::parse_dnsbl_site("k", "bl.test");
    CHECK(s.query_name("192.0.2.1") == "1.2.0.192.bl.test");
    CHECK(s.query_name("2001:db8::1") ==
          "1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.b.d.0.1.0.0.2.bl.test");
    CHECK(s.query_name("not an address").empty());
}

TEST_CASE("host names from DNS are checked before they are used", "[dnsbl]") {
    CHECK(smx::dns::valid_hostname("mail.example.com"));
    CHECK(smx::dns::valid_hostname("mail.example.com."));
    CHECK_FALSE(smx::dns::valid_hostname(""));
    CHECK_FALSE(smx::dns::valid_hostname("a..b"));
    CHECK_FALSE(smx::dns::valid_hostname("evil name]\r\nX-Header: y"));
    CHECK_FALSE(smx::dns::valid_hostname(std::string(64, 'a') + ".test"));
    CHECK_FALSE(smx::dns::valid_hostname(std::string(254, 'a')));
}

TEST_CASE("[dnsbl] and [policy] keys: values with units, signed thresholds", "[dnsbl]") {
    const auto c = load("[dnsbl]\nsites = [\"bl.test*2\", \"wl.test=127.0.0.2*-3\"]\nthreshold = 2\n"
                        "whitelist_threshold = -3\ntimeout = \"1500ms\"\naction = \"ignore\"\n"
                        "pregreet_wait = \"2s\"\n[policy]\nclient_name_timeout = \"1m\"\n"
                        "reject_unknown_client_hostname = true\ndelay_reject = false\n");
    REQUIRE(c.dnsbl.sites.size() == 2);
    CHECK(c.dnsbl.sites[1].weight == -3);
    CHECK(c.dnsbl.threshold == 2);
    CHECK(c.dnsbl.whitelist_threshold == -3);
    CHECK(c.dnsbl.timeout == std::chrono::milliseconds(1500));
    CHECK_FALSE(c.dnsbl.reject);
    CHECK(c.dnsbl.pregreet_wait == std::chrono::seconds(2));
    CHECK(c.policy.client_name_timeout == std::chrono::minutes(1));
    CHECK(c.policy.reject_unknown_client_hostname);
    CHECK_FALSE(c.policy.delay_reject);
    CHECK(smx::find_config_key("dnsbl.timeout")->member.show(c) == "\"1500ms\"");

    const smx::Config d = smx::load_config("");
    CHECK(d.dnsbl.sites.empty());
    CHECK(d.dnsbl.pregreet_wait.count() == 0);
    CHECK(d.policy.client_name_lookup);

    // A bare number is seconds, as postfix's time values.
    CHECK(load("[dnsbl]\ntimeout = \"10\"\n").dnsbl.timeout.count() == 10000);
    CHECK(load("[dnsbl]\ntimeout = 3\n").dnsbl.timeout.count() == 3000);
    for (const char* bad : {"[dnsbl]\ntimeout = \"10x\"\n", "[dnsbl]\ntimeout = \"0s\"\n",
                            "[anvil]\nrate_time_unit = \"1500ms\"\n",
                            "[dnsbl]\ntimeout = \"2d\"\n", "[dnsbl]\npregreet_wait = \"61s\"\n",
                            "[dnsbl]\nthreshold = 0\n", "[dnsbl]\nwhitelist_threshold = 1\n",
                            "[dnsbl]\nsites = [\"bl.test=1.2.3\"]\n", "[dnsbl]\naction = \"drop\"\n",
                            "[policy]\nclient_name_timeout = \"-1s\"\n"}) {
        INFO(bad);
        CHECK_THROWS_AS(load(bad), smx::ConfigError);
    }
}

TEST_CASE("a lookup ends at its deadline when the name server never answers", "[dnsbl]") {
    namespace asio = boost::asio;
    asio::io_context io;
    // Bound, never read: queries vanish.
    asio::ip::udp::socket silent(io, {asio::ip::make_address("127.0.0.1"), 0});
    smx::dns::Resolver r(io.get_executor());
    REQUIRE(r.set_servers("127.0.0.1:" + std::to_string(silent.local_endpoint().port())));
    std::optional<smx::dns::Answer> a, b;
    smx::dns::Clock::time_point a_at, b_at;
    const auto t0 = smx::dns::Clock::now();
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        // Two waiters of one query, each with its own deadline.
        auto first = r.start(smx::dns::Kind::a, "2.0.0.127.bl.test");
        auto second = r.start(smx::dns::Kind::a, "2.0.0.127.bl.test");
        a = co_await r.wait(std::move(first), t0 + std::chrono::milliseconds(200));
        a_at = smx::dns::Clock::now();
        b = co_await r.wait(std::move(second), t0 + std::chrono::milliseconds(400));
        b_at = smx::dns::Clock::now();
    }, [&](std::exception_ptr e) {
        io.stop();  // the query is still out: the resolver goes with it
        if (e) std::rethrow_exception(e);
    });
    io.run_for(std::chrono::seconds(10));
    REQUIRE(a);
    REQUIRE(b);
    CHECK(a->status == ARES_ETIMEOUT);
    CHECK(b->status == ARES_ETIMEOUT);
    // Each at its own deadline, long before c-ares itself gives up (2 tries of 2 s).
    CHECK(a_at - t0 >= std::chrono::milliseconds(200));
    CHECK(a_at - t0 < std::chrono::milliseconds(1900));
    CHECK(b_at - t0 >= std::chrono::milliseconds(400));
    CHECK(b_at - t0 < std::chrono::milliseconds(1900));
    CHECK(r.cached() == 0);  // a failure is not cached
}
