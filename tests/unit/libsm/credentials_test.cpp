#include "libsm/credentials.hpp"

#include "libsm/config.hpp"

#include <catch2/catch.hpp>

using namespace smx;

namespace {
std::string error_of(const std::string& text) {
    try {
        parse_credentials("/etc/smx/sasl_passwd", text);
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "<no error>";
}
} // namespace

TEST_CASE("credentials: postfix's sasl_passwd format, keyed as DELIVER nexthops") {
    const auto m = parse_credentials("/etc/smx/sasl_passwd",
                                     "# comment\n\n  [Relay.Example]:587\talice:pa ss:word  \r\n"
                                     "smtp.example bob:x\n[192.0.2.1]:2525 carol:y");
    REQUIRE(m.size() == 3);
    REQUIRE(m.at("[relay.example]:587").user == "alice");
    REQUIRE(m.at("[relay.example]:587").password == "pa ss:word");
    REQUIRE(m.at("smtp.example:25").user == "bob");
    REQUIRE(m.at("[192.0.2.1]:2525").password == "y");
}

TEST_CASE("credentials: bad lines name the file and the line, never the secret") {
    REQUIRE(error_of("[a.example]:587\n") == "client.sasl_password_file: /etc/smx/sasl_passwd "
                                             "line 1: expected \"nexthop user:password\"");
    REQUIRE(error_of("\n[a.example]:587 :secret1\n").find("line 2: expected") !=
            std::string::npos);
    const std::string nul = error_of(std::string("[a.example]:587 u:sec\0ret2\n", 27));
    REQUIRE(nul.find("NUL or CR") != std::string::npos);
    REQUIRE(nul.find("sec") == std::string::npos);
    const std::string port = error_of("[a.example]:99999 u:secret3\n");
    REQUIRE(port.find("line 1: bad next hop '[a.example]:99999'") != std::string::npos);
    REQUIRE(port.find("secret3") == std::string::npos);
}

TEST_CASE("credentials: from the bytes smx run passed, none without the key") {
    ClientConfig cfg;
    Secrets s;
    REQUIRE(credentials(cfg, s).empty());
    cfg.sasl_password_file = "/etc/smx/sasl_passwd";
    REQUIRE_THROWS_WITH(credentials(cfg, s),
                        Catch::Contains("client.sasl_password_file: not passed by smx run"));
    s.set(Secret::sasl_password_file, "[a.example]:587 u:p\n");
    REQUIRE(credentials(cfg, s).at("[a.example]:587").password == "p");
}
