#include "credentials.hpp"

#include "config.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace sm;

namespace {
// A 0600 file (mkstemp's mode) holding text.
std::string private_file(const std::string& text) {
    char path[] = "/tmp/smx-credentials-test-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path, std::ios::binary) << text;
    return path;
}

std::string error_of(const std::string& text) {
    const auto p = private_file(text);
    try {
        load_credentials("client.sasl_password_file", p);
    } catch (const ConfigError& e) {
        std::remove(p.c_str());
        return e.what();
    }
    std::remove(p.c_str());
    return "<no error>";
}
} // namespace

TEST_CASE("credentials: postfix's sasl_passwd format, keyed as DELIVER nexthops") {
    const auto p = private_file("# comment\n\n  [Relay.Example]:587\talice:pa ss:word  \r\n"
                                "smtp.example bob:x\n[192.0.2.1]:2525 carol:y");
    const auto m = load_credentials("client.sasl_password_file", p);
    std::remove(p.c_str());
    REQUIRE(m.size() == 3);
    REQUIRE(m.at("[relay.example]:587").user == "alice");
    REQUIRE(m.at("[relay.example]:587").password == "pa ss:word");
    REQUIRE(m.at("smtp.example:25").user == "bob");
    REQUIRE(m.at("[192.0.2.1]:2525").password == "y");
}

TEST_CASE("credentials: bad lines name the line, never the secret") {
    REQUIRE(error_of("[a.example]:587\n").find("line 1: expected") != std::string::npos);
    REQUIRE(error_of("\n[a.example]:587 :secret1\n").find("line 2: expected") !=
            std::string::npos);
    const std::string nul = error_of(std::string("[a.example]:587 u:sec\0ret2\n", 27));
    REQUIRE(nul.find("NUL or CR") != std::string::npos);
    REQUIRE(nul.find("sec") == std::string::npos);
    const std::string port = error_of("[a.example]:99999 u:secret3\n");
    REQUIRE(port.find("line 1: bad next hop '[a.example]:99999'") != std::string::npos);
    REQUIRE(port.find("secret3") == std::string::npos);
}

TEST_CASE("credentials: the file must be private") {
    const auto p = private_file("[a.example]:587 u:p\n");
    ::chmod(p.c_str(), 0604);
    try {
        load_credentials("client.sasl_password_file", p);
        FAIL("a world-readable file was accepted");
    } catch (const ConfigError& e) {
        REQUIRE(std::string(e.what()).find("(mode 0604)") != std::string::npos);
    }
    ::chmod(p.c_str(), 0600);
    REQUIRE(load_credentials("client.sasl_password_file", p).size() == 1);
    std::remove(p.c_str());
}
