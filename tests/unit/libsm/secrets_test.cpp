#include "libsm/secrets.hpp"

#include "libsm/config.hpp"
#include "libsm/record.hpp"

#include <catch2/catch.hpp>

using namespace smx;

namespace {
std::string decode_error(const std::string& bundle) {
    try {
        Secrets::decode(bundle);
    } catch (const std::runtime_error& e) {
        return e.what();
    }
    return "<no error>";
}
} // namespace

TEST_CASE("secrets: a bundle holds each secret's bytes, binary ones too") {
    Secrets s;
    s.set(Secret::tls_cert, "-----BEGIN CERTIFICATE-----\n...");
    s.set(Secret::tls_key, std::string("\0\xff key", 6));
    s.set(Secret::sasl_password_file, "");
    const Secrets d = Secrets::decode(s.encode());
    REQUIRE(d.at(Secret::tls_cert) == "-----BEGIN CERTIFICATE-----\n...");
    REQUIRE(d.at(Secret::tls_key) == std::string("\0\xff key", 6));
    REQUIRE(d.has(Secret::sasl_password_file));
    REQUIRE(d.at(Secret::sasl_password_file).empty());
    REQUIRE_FALSE(d.has(Secret::tls_ca_file));
    REQUIRE(Secrets::decode(Secrets().encode()).has(Secret::tls_cert) == false);
}

TEST_CASE("secrets: one not passed is a config error naming its key") {
    try {
        Secrets().at(Secret::tls_key);
        FAIL("no error");
    } catch (const ConfigError& e) {
        REQUIRE(e.key == "server.tls_key");
        REQUIRE(std::string(e.what()).find("not passed by smx run") != std::string::npos);
    }
}

TEST_CASE("secrets: what is not a bundle is refused") {
    Secrets s;
    s.set(Secret::tls_ca_file, "ca");
    const std::string good = s.encode();
    REQUIRE(decode_error(good) == "<no error>");
    REQUIRE(decode_error("") == "not a secrets bundle (no SMXS at its start)");
    REQUIRE(decode_error("XMXS" + good.substr(4)) == "not a secrets bundle (no SMXS at its start)");
    REQUIRE(decode_error(good.substr(0, good.size() - 1)) == "secrets bundle truncated");
    REQUIRE(decode_error(good + good.substr(4)) == "secrets bundle: client.tls_ca_file twice");
    REQUIRE(decode_error("SMXS" + std::string(rec::Writer().str(9, "x").fields())) ==
            "secrets bundle: unknown secret 9");
    const std::string big(max_size(Secret::tls_key) + 1, 'k');
    REQUIRE(decode_error("SMXS" + std::string(rec::Writer().str(2, big).fields())) ==
            "secrets bundle: server.tls_key over 1048576 bytes");
    REQUIRE(decode_error(std::string(max_bundle + 1, 'S')).find("over") != std::string::npos);
}
