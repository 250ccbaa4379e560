#include "smtps/policy.hpp"

#include <catch2/catch.hpp>

using namespace smx::smtps;

TEST_CASE("parse_path") {
    auto p = parse_path("FROM:<a@b.c> SIZE=10  BODY=8BITMIME ", "FROM:");
    REQUIRE(p);
    CHECK(p->addr == "a@b.c");
    CHECK(p->params == "SIZE=10  BODY=8BITMIME");
    p = parse_path("from: <>", "FROM:");
    REQUIRE(p);
    CHECK(p->addr.empty());
    p = parse_path("TO:<@relay.x,@r2.y:u@d.z>", "TO:");
    REQUIRE(p);
    CHECK(p->addr == "u@d.z");
    p = parse_path("TO:<\"a>b\"@d.z>", "TO:");
    REQUIRE(p);
    CHECK(p->addr == "\"a>b\"@d.z");
    p = parse_path("TO:u@d.z", "TO:");
    REQUIRE(p);
    CHECK(p->addr == "u@d.z");
    CHECK_FALSE(parse_path("TO:<u@d.z", "TO:"));
    CHECK_FALSE(parse_path("TO:<u@d.z>x", "TO:"));
    CHECK_FALSE(parse_path("FROM:<u@d.z>", "TO:"));
    CHECK_FALSE(parse_path("TO:", "TO:"));
}

TEST_CASE("valid_address") {
    CHECK(valid_address("", true));
    CHECK_FALSE(valid_address("", false));
    CHECK(valid_address("a.b+c@ex-ample.com", false));
    CHECK(valid_address("\"john doe\"@example.com", false));
    CHECK(valid_address("u@[127.0.0.1]", false));
    CHECK_FALSE(valid_address("user", false));
    CHECK_FALSE(valid_address("a b@example.com", false));
    CHECK_FALSE(valid_address("a@exa mple.com", false));
    CHECK_FALSE(valid_address("a@example..com", false));
    CHECK_FALSE(valid_address("a@", false));
    CHECK_FALSE(valid_address("@b.c", false));
    CHECK_FALSE(valid_address("a\x80@b.c", false));
    CHECK_FALSE(valid_address(std::string(65, 'a') + "@b.c", false));
    // Address literals: IPv4 or IPv6 only (found by fuzz/smtp_command).
    CHECK(valid_address("u@[IPv6:2001:db8::1]", false));
    CHECK_FALSE(valid_address("u@[IPv6:nope]", false));
    CHECK_FALSE(valid_address("u@[300.1.1.1]", false));
    CHECK_FALSE(valid_address("u@[x:<%%%]", false));
    // A NUL ends what inet_pton reads; a CR after it must not pass (fuzz/smtp_command).
    using namespace std::string_literals;
    CHECK_FALSE(valid_address("x@[1.2.3.4\0\r]"s, false));
    CHECK_FALSE(valid_address("x@[IPv6:::1\0\r]"s, true));
    // Never anything that would break out of the < > of a command.
    CHECK_FALSE(valid_address("\"a>b\"@example.com", false));
    CHECK_FALSE(valid_address("\"a<b\"@example.com", false));
}

TEST_CASE("routing in the local part") {
    CHECK(routes_in_local_part("u%evil@relay.test"));
    CHECK(routes_in_local_part("evil!u@relay.test"));
    CHECK(routes_in_local_part("\"u@evil\"@relay.test"));
    CHECK_FALSE(routes_in_local_part("plain.user@relay.test"));
}

TEST_CASE("relay policy") {
    smx::ServerConfig cfg;
    cfg.relay_networks.push_back(smx::parse_cidr("k", "10.0.0.0/8"));
    cfg.relay_domains = {"example.com", ".example.net"};
    RelayPolicy p(cfg);
    CHECK(p.trusted_client("10.1.2.3"));
    CHECK_FALSE(p.trusted_client("11.1.2.3"));
    CHECK(p.relay_domain("EXAMPLE.com"));
    CHECK_FALSE(p.relay_domain("sub.example.com"));
    CHECK(p.relay_domain("sub.example.net"));
    CHECK_FALSE(p.relay_domain("example.net"));
    CHECK_FALSE(p.relay_domain(""));
}
