// The per-client limits of SMTPS sessions (smtps/client_limits.hpp) over
// real TCP, counted by QMGR's anvil table in the fake QMGR.
#include "smtps/client_limits.hpp"
#include "tests/unit/smtps/harness.hpp"

#include <catch2/catch.hpp>

using namespace smtps_test;

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

void untrusted(smx::Config& c) {
    c.server.relay_networks.clear();
    c.server.relay_domains = {"b.test"};
}

} // namespace

TEST_CASE("anvil_key: IPv4 as it is, IPv6 by its network", "[anvil]") {
    using smx::smtps::anvil_key;
    CHECK(anvil_key("192.0.2.7", 64) == "192.0.2.7");
    CHECK(anvil_key("2001:db8:1:2:aaaa:bbbb:cccc:dddd", 64) == "2001:db8:1:2::/64");
    CHECK(anvil_key("2001:db8:1:2::1", 64) == anvil_key("2001:db8:1:2:ffff::9", 64));
    CHECK(anvil_key("2001:db8:1:3::1", 64) != anvil_key("2001:db8:1:2::1", 64));
    CHECK(anvil_key("2001:db8:1:2::1", 48) == "2001:db8:1::/48");
    CHECK(anvil_key("2001:db8:1:2::1", 63) == "2001:db8:1:2::/63");
    CHECK(anvil_key("2001:db8:1:3::1", 63) == "2001:db8:1:2::/63");
    CHECK(anvil_key("2001:db8::1", 128) == "2001:db8::1");
}

TEST_CASE("message rate: the MAIL past the limit gets 450 4.7.1", "[anvil]") {
    Harness h([](smx::Config& c) {
        untrusted(c);
        c.anvil.message_rate_limit = 2;
    });
    Client c(h.port());
    REQUIRE(starts(c.reply(), "220"));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250"));
    for (int i = 0; i < 2; ++i) {
        CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
        CHECK(starts(c.cmd("RSET"), "250"));
    }
    CHECK(c.cmd("MAIL FROM:<a@a.test>") == "450 4.7.1 Error: too much mail from 127.0.0.1");
    // Out of sequence, a MAIL is not counted: 503 as ever.
    Client d(h.port());
    REQUIRE(starts(d.reply(), "220"));
    CHECK(starts(d.cmd("MAIL FROM:<a@a.test>"), "503"));
}

TEST_CASE("recipient rate: the RCPT past the limit gets 450 4.7.1, across messages", "[anvil]") {
    Harness h([](smx::Config& c) {
        untrusted(c);
        c.anvil.recipient_rate_limit = 3;
    });
    Client c(h.port());
    REQUIRE(starts(c.reply(), "220"));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<r1@b.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<r2@b.test>"), "250"));
    CHECK(starts(c.cmd("RSET"), "250"));
    // A MAIL whose RCPT counted ahead went unused gives it back.
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RSET"), "250"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<r3@b.test>"), "250"));
    CHECK(c.cmd("RCPT TO:<r4@b.test>") == "450 4.7.1 Error: too many recipients from 127.0.0.1");
    CHECK(c.cmd("RCPT TO:<r5@b.test>") == "450 4.7.1 Error: too many recipients from 127.0.0.1");
}

TEST_CASE("connection rate: the connection past the limit gets 421 and is closed", "[anvil]") {
    Harness h([](smx::Config& c) {
        untrusted(c);
        c.anvil.connection_rate_limit = 2;
    });
    {
        Client a(h.port()), b(h.port());
        CHECK(starts(a.reply(), "220"));
        CHECK(starts(b.reply(), "220"));
    }
    Client c(h.port());
    CHECK(c.reply() == "421 4.7.0 mx.test Error: too many connections from 127.0.0.1");
    CHECK(c.closed());
}

TEST_CASE("exempt clients and limits of 0 are not limited", "[anvil]") {
    SECTION("anvil.exceptions") {
        Harness h([](smx::Config& c) {
            untrusted(c);
            c.anvil.connection_rate_limit = 1;
            c.anvil.exceptions = {smx::parse_cidr("t", "127.0.0.0/8")};
        });
        for (int i = 0; i < 3; ++i) {
            Client a(h.port());
            CHECK(starts(a.reply(), "220"));
        }
    }
    SECTION("relay_networks, unless exempt_relay_networks is false") {
        Harness h([](smx::Config& c) { c.anvil.message_rate_limit = 1; });
        Client a(h.port());
        REQUIRE(starts(a.reply(), "220"));
        REQUIRE(starts(a.cmd("EHLO client.test"), "250"));
        for (int i = 0; i < 3; ++i) {
            CHECK(starts(a.cmd("MAIL FROM:<a@a.test>"), "250"));
            CHECK(starts(a.cmd("RSET"), "250"));
        }
        Harness counted([](smx::Config& c) {
            c.anvil.message_rate_limit = 1;
            c.anvil.exempt_relay_networks = false;
        });
        Client b(counted.port());
        REQUIRE(starts(b.reply(), "220"));
        REQUIRE(starts(b.cmd("EHLO client.test"), "250"));
        CHECK(starts(b.cmd("MAIL FROM:<a@a.test>"), "250"));
        CHECK(starts(b.cmd("RSET"), "250"));
        CHECK(starts(b.cmd("MAIL FROM:<a@a.test>"), "450 4.7.1"));
    }
    SECTION("max_connections_per_client = 0") {
        Harness h([](smx::Config& c) {
            untrusted(c);
            c.server.max_connections_per_client = 0;
        });
        std::vector<std::unique_ptr<Client>> held;
        for (int i = 0; i < 60; ++i) {
            held.push_back(std::make_unique<Client>(h.port()));
            CHECK(starts(held.back()->reply(), "220"));
        }
    }
}
