// The table of keys (libsm/config_keys.hpp) and what is made from it or
// written beside it: load_config, reload's restart keys, docs/config.md's
// tables (the source of smx.toml(5)), the man page source made from them,
// and the example and installed config files make-config writes.
#include "libsm/config_keys.hpp"
#include "libsm/config_reload.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <unistd.h>

using namespace smx;

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    INFO(path);
    REQUIRE(f);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

Config load_text(const std::string& text) {
    char path[] = "/tmp/smx-config-keys-test-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path) << text;
    struct Remove {
        const char* p;
        ~Remove() { std::remove(p); }
    } remove{path};
    return load_config(path);
}

std::string section_of(const ConfigKey& k) { return std::string(k.member.section); }

// A row of docs/config.md's key tables.
struct DocRow {
    std::string default_cell, applied;
};

// section.key -> its row, read on its own here (not with config_man.py).
std::map<std::string, DocRow> documented() {
    std::map<std::string, DocRow> rows;
    std::istringstream doc(read_file(SMX_SOURCE_ROOT "/docs/config.md"));
    const std::regex heading(R"(^## \[(\w+)\].*)"), code("`(\\w+)`"),
        row(R"(^\| (`[^|]+`) \| ([^|]+) \| (\w+) \|.*)");
    std::string line, section;
    std::smatch m;
    while (std::getline(doc, line)) {
        if (std::regex_match(line, m, heading)) section = m[1];
        if (!std::regex_match(line, m, row)) continue;
        const std::string keys = m[1], def = m[2], applied = m[3];
        for (auto it = std::sregex_iterator(keys.begin(), keys.end(), code);
             it != std::sregex_iterator(); ++it)
            rows[section + "." + (*it)[1].str()] = {def.substr(0, def.find_last_not_of(' ') + 1),
                                                    applied};
    }
    return rows;
}

// The keys of a file make-config wrote: section.key -> (set, value), where
// set is false for a line commented out ("#key = value").
std::map<std::string, std::pair<bool, std::string>> template_keys(const std::string& path) {
    std::map<std::string, std::pair<bool, std::string>> keys;
    std::istringstream text(read_file(path));
    const std::regex heading(R"(^\[(\w+)\]$)"), entry(R"(^(#?)(\w+) = (.*)$)");
    std::string line, section;
    std::smatch m;
    while (std::getline(text, line)) {
        if (std::regex_match(line, m, heading)) section = m[1];
        if (section == "routes" || section == "tls_policy" || !std::regex_match(line, m, entry))
            continue;
        const std::string name = section + "." + m[2].str();
        INFO(path << ": " << name);
        CHECK(keys.count(name) == 0);
        keys[name] = {m[1].str().empty(), m[3]};
    }
    return keys;
}

} // namespace

TEST_CASE("config keys: section.key, each once, with a line saying what it is", "[config_keys]") {
    std::set<std::string> names;
    for (const auto& k : config_keys()) {
        INFO(k.name);
        CHECK(names.insert(k.name).second);
        CHECK(k.name == section_of(k) + "." + std::string(k.key()));
        CHECK(find_config_key(k.name) == &k);
        CHECK_FALSE(k.description.empty());
        CHECK(k.description.find('\n') == std::string::npos);
        CHECK_FALSE(k.member.type.empty());
        // A default in words is set by fill, and the example config shows
        // an example instead (the machine's own would differ by build host).
        CHECK(k.computed_default.empty() == !k.fill);
        if (k.fill) CHECK_FALSE(k.example.empty());
    }
    CHECK(names.size() >= 70);
    CHECK_FALSE(find_config_key("server.no_such_key"));
}

TEST_CASE("every key's default round-trips through its row", "[config_keys]") {
    const Config defaults = load_config("");
    const Config initial;
    for (const auto& k : config_keys()) {
        INFO(k.name);
        const std::string shown = k.member.show(defaults);
        // The default is the member's initializer, unless the row computes it.
        if (!k.fill) CHECK(k.member.show(initial) == shown);
        if (!accepted(k)) continue;
        const Config again =
            load_text("[" + section_of(k) + "]\n" + std::string(k.key()) + " = " + shown + "\n");
        CHECK(k.member.show(again) == shown);
        Config copied;
        k.member.copy(again, copied);
        CHECK(k.member.show(copied) == shown);
    }
}

TEST_CASE("a key a row computes follows what it follows", "[config_keys]") {
    const Config c = load_text("[server]\nhostname = \"mx.example.org\"\ntls_cert = \"c.pem\"\n"
                               "tls_key = \"k.pem\"\n");
    CHECK(c.client.helo_name == "mx.example.org");
    CHECK(c.server.tls_security_level == TlsLevel::may);
    char host[256] = {};
    REQUIRE(::gethostname(host, sizeof host - 1) == 0);
    CHECK(load_config("").server.hostname == (host[0] ? host : "localhost"));
    CHECK(load_config("").server.tls_security_level == TlsLevel::none);
}

TEST_CASE("a reload keeps the restart keys, and only those", "[config_keys]") {
    const Config running = load_config("");
    Config next = load_text(R"([server]
listen = ["127.0.0.1:2526"]
max_errors = 20
relay_domains = ["example.net"]
[queue]
commit_interval_us = 500
content_segments = false
[client]
rate_limit = 5
smtp_port = 2525
[log]
level = "debug"
syslog_facility = "local0"
[stats]
listen = "127.0.0.1:9525"
)");
    CHECK(keep_restart_only(running, next) ==
          std::vector<std::string>{"server.listen", "queue.commit_interval_us",
                                   "queue.content_segments", "client.smtp_port",
                                   "log.syslog_facility", "stats.listen"});
    for (const auto& k : config_keys()) {
        INFO(k.name);
        if (k.reload == Reload::restart) CHECK(k.member.show(next) == k.member.show(running));
    }
    CHECK(next.server.max_errors == 20);
    CHECK(next.server.relay_domains == std::vector<std::string>{"example.net"});
    CHECK(next.client.rate_limit == 5);
    CHECK(next.log.level == "debug");
}

TEST_CASE("docs/config.md documents every key, its default and when it applies",
          "[config_keys]") {
    const auto docs = documented();
    const Config initial;
    for (const auto& k : config_keys()) {
        INFO(k.name);
        const auto d = docs.find(k.name);
        REQUIRE(d != docs.end());
        if (k.fill) {
            std::string words = d->second.default_cell;
            std::erase(words, '`');
            CHECK(words == k.computed_default);
        } else {
            // The first code span: "`10485760` (10 MiB)".
            const std::string& cell = d->second.default_cell;
            REQUIRE(cell.starts_with("`"));
            CHECK(cell.substr(1, cell.find('`', 1) - 1) == k.member.show(initial));
        }
        CHECK(d->second.applied == (k.reload == Reload::restart ? "restart" : "reload"));
    }
    for (const auto& [name, row] : docs) {
        INFO("docs/config.md documents " << name);
        CHECK(find_config_key(name));
    }
}

TEST_CASE("the man page source has an entry for every key, in its section", "[config_keys]") {
    const std::string man = read_file(MAN_SOURCE);
    for (const auto& k : config_keys()) {
        INFO(k.name);
        const auto heading = man.find("\n# [" + section_of(k) + "]");
        REQUIRE(heading != std::string::npos);
        const auto next = man.find("\n# ", heading + 1);
        std::string key(k.key());
        for (auto at = key.find('_'); at != std::string::npos; at = key.find('_', at + 2))
            key.insert(at, "\\");
        const auto entry = man.find("*" + key + "* = ", heading);
        CHECK(entry < next);
    }
}

TEST_CASE("the example config: the keys to decide set, every other at its default, "
          "commented out", "[config_keys]") {
    const auto keys = template_keys(EXAMPLE_CONFIG);
    const Config initial;
    for (const auto& k : config_keys()) {
        INFO(k.name);
        const auto e = keys.find(k.name);
        REQUIRE(e != keys.end());
        const auto& [set, value] = e->second;
        if (!k.example.empty()) {
            CHECK_FALSE(set);
            CHECK(value == k.example);
        } else {
            CHECK(set == k.decide);
            CHECK(value == k.member.show(initial));
        }
    }
    CHECK(keys.size() == config_keys().size());
    // What it sets is the built-in defaults.
    const Config example = load_config(EXAMPLE_CONFIG), defaults = load_config("");
    for (const auto& k : config_keys()) {
        INFO(k.name);
        CHECK(k.member.show(example) == k.member.show(defaults));
    }
}

TEST_CASE("the installed config is the example with the spool and run directories set",
          "[config_keys]") {
    auto installed = template_keys(INSTALLED_CONFIG);
    const auto example = template_keys(EXAMPLE_CONFIG);
    using Line = std::pair<bool, std::string>;
    CHECK(installed["queue.spool_dir"] == Line{true, "\"" INSTALLED_SPOOL_DIR "\""});
    CHECK(installed["queue.run_dir"] == Line{true, "\"" INSTALLED_RUN_DIR "\""});
    installed["queue.spool_dir"] = example.at("queue.spool_dir");
    installed["queue.run_dir"] = example.at("queue.run_dir");
    CHECK(installed == example);
}
