// Every key of smx.toml, declared once, as postfix declares its parameters
// in tables: one row of config_keys() (config_keys.cpp) gives the key, the
// member of Config it sets with its type and bounds, whether a reload
// applies it, and a line saying what it is. The default is the member's
// initializer in config.hpp, or for the few that follow other keys (the
// host name, ...) the row's fill.
//
// From the rows: load_config reads and checks the file, keep_restart_only
// keeps the restart-only keys at a reload, `smx config` prints the keys,
// etc/make_config writes the example and the installed smx.toml. Tests hold
// docs/config.md (and so smx.toml(5)) to them.
#pragma once

#include "libsm/config.hpp"

#include <toml++/toml.h>

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace smx {

// When a changed value takes effect: at `smx reload`, or only when smx run
// starts again (a reload keeps the running value and names the key).
enum class Reload { reload, restart };

// How a key's value is read into its member, shown and copied.
struct Member {
    std::string_view section;  // "server": the part of Config the member is in
    std::string type;          // "integer 1..100000", for people
    // The node's value into the member, or a ConfigError naming key.
    std::function<void(const std::string& key, const toml::node&, Config&)> read;
    // The member's value in TOML syntax: "1000", "\"smxs\"", "[\"::1/128\"]".
    std::function<std::string(const Config&)> show;
    std::function<void(const Config& from, Config& to)> copy;
    // A key of lookup tables (the `tables` kind): its specs, which
    // check-config and smx run open; unset for every other kind.
    std::function<std::vector<std::string>(const Config&)> tables = {};
};

struct ConfigKey {
    // The rows of config_keys() are written with this and the setters below.
    ConfigKey(std::string name, Member member, Reload reload, std::string description);

    std::string name;  // "server.max_recipients": section.key
    Member member;
    Reload reload;
    std::string description;  // one line
    // A default that follows from other keys or the machine, said in words
    // ("the system host name"), set by fill when the file leaves the key out.
    std::string computed_default;
    std::function<void(Config&)> fill;
    // Set: the example config shows this value, commented out, instead of
    // the default (which may be the build machine's, or empty).
    std::string example;
    // Only a test build (meson -Dtest_hooks=true) accepts it.
    bool test_build = false;
    // The administrator decides it: the installed config sets it.
    bool decide = false;

    // "max_recipients": the name within its section.
    std::string_view key() const {
        return std::string_view(name).substr(member.section.size() + 1);
    }
    ConfigKey&& computed(std::string words, std::function<void(Config&)> fill_default) &&;
    ConfigKey&& shown_as(std::string example_value) &&;
    ConfigKey&& only_in_test_builds() &&;
    ConfigKey&& decided() &&;
};

// Every key, [server] first, then [queue], [client], [log], [stats], [policy],
// [dnsbl], [anvil], [rewrite]; keys of a section in the order the docs and
// the example config list them.
const std::vector<ConfigKey>& config_keys();

// The row of "section.key", or null.
const ConfigKey* find_config_key(std::string_view name);

// This build accepts the key (test-build keys only in a test build).
bool accepted(const ConfigKey& k);

// Every table the config names, as (key, spec) in the order of the keys:
// what check-config and smx run open before anything starts.
std::vector<std::pair<std::string, std::string>> config_tables(const Config& cfg);

// A string value (with no NUL in it), and a string or a list of strings,
// as every key and table entry reads them; a ConfigError naming key if the
// node is not one.
std::string config_string(const std::string& key, const toml::node& n);
std::vector<std::string> config_strings(const std::string& key, const toml::node& n);

// s as a TOML basic string, quotes and escapes included.
std::string toml_string(std::string_view s);

} // namespace smx
