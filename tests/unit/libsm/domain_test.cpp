// Domains: ASCII lower-casing, whatever the locale, and the part after the
// last '@'.
#include "libsm/domain.hpp"

#include <catch2/catch.hpp>

#include <string>

TEST_CASE("domains: ASCII-only lower-casing and the part after the last '@'") {
    CHECK(smx::lower("Mail.EXAMPLE.org") == "mail.example.org");
    CHECK(smx::lower("") == "");
    CHECK(smx::upper("auth=Plain login") == "AUTH=PLAIN LOGIN");
    CHECK(smx::upper("b\xC3\xBC") == "B\xC3\xBC");
    // UTF-8 (SMTPUTF8 domains) and other bytes are left alone.
    CHECK(smx::lower("B\xC3\x9C" "CHER.Example") == "b\xC3\x9C" "cher.example");
    CHECK(smx::lower(std::string_view("A\0Z", 3)) == std::string("a\0z", 3));
    CHECK(smx::lower('[') == '[');
    CHECK(smx::lower('@') == '@');

    CHECK(smx::iequals("RCPT", "rcpt"));
    CHECK_FALSE(smx::iequals("RCPT", "rcp"));
    CHECK_FALSE(smx::iequals("\xC3\x9C", "\xC3\xBC"));  // no Unicode case folding

    CHECK(smx::domain_part("User@Example.ORG") == "Example.ORG");
    CHECK(smx::domain_of("User@Example.ORG") == "example.org");
    // The last '@': a quoted local part may hold one.
    CHECK(smx::domain_of("\"a@b\"@X.Test") == "x.test");
    CHECK(smx::domain_of("a@b@c.net") == "c.net");
    CHECK(smx::domain_of("postmaster") == "");
    CHECK(smx::domain_of("") == "");
    CHECK(smx::domain_of("user@") == "");
    CHECK(smx::domain_of("u@[IPv6:::1]") == "[ipv6:::1]");
}
