// Domains: ASCII lower-casing, whatever the locale, and the part after the
// last '@'.
#include "domain.hpp"

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("domains: ASCII-only lower-casing and the part after the last '@'") {
    CHECK(sm::lower("Mail.EXAMPLE.org") == "mail.example.org");
    CHECK(sm::lower("") == "");
    CHECK(sm::upper("auth=Plain login") == "AUTH=PLAIN LOGIN");
    CHECK(sm::upper("b\xC3\xBC") == "B\xC3\xBC");
    // UTF-8 (SMTPUTF8 domains) and other bytes are left alone.
    CHECK(sm::lower("B\xC3\x9C" "CHER.Example") == "b\xC3\x9C" "cher.example");
    CHECK(sm::lower(std::string_view("A\0Z", 3)) == std::string("a\0z", 3));
    CHECK(sm::lower('[') == '[');
    CHECK(sm::lower('@') == '@');

    CHECK(sm::iequals("RCPT", "rcpt"));
    CHECK_FALSE(sm::iequals("RCPT", "rcp"));
    CHECK_FALSE(sm::iequals("\xC3\x9C", "\xC3\xBC"));  // no Unicode case folding

    CHECK(sm::domain_part("User@Example.ORG") == "Example.ORG");
    CHECK(sm::domain_of("User@Example.ORG") == "example.org");
    // The last '@': a quoted local part may hold one.
    CHECK(sm::domain_of("\"a@b\"@X.Test") == "x.test");
    CHECK(sm::domain_of("a@b@c.net") == "c.net");
    CHECK(sm::domain_of("postmaster") == "");
    CHECK(sm::domain_of("") == "");
    CHECK(sm::domain_of("user@") == "");
    CHECK(sm::domain_of("u@[IPv6:::1]") == "[ipv6:::1]");
}
