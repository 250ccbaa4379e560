// Writes an smx.toml from the table of keys (libsm/config_keys.hpp), at
// build time (etc/meson.build): the example, and the installed one with its
// spool and run directories.
//
//   make-config OUT [KEY=STRING...]
//
// In each section the keys an administrator decides come first, set (or
// shown commented out with an example where their default is not fixed);
// KEY=STRING sets a string key too. Every other key follows at its default,
// commented out, so that a later change of a default reaches a relay whose
// administrator never set it. The file is loaded back before it is kept.
#include "libsm/config_keys.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

namespace {

const char* const head = R"(# smx.toml: the configuration of the smx relay. smx.toml(5) explains
# every key.
#
# The keys set in each section are the ones to decide for this relay. Every
# other key is shown at its default, commented out: to change one, remove
# the "#" and edit the value. A key left commented out keeps the default of
# the smx that runs, also when a newer version changes it.
#
#   smx check-config    checks this file as smx run would
#   smx config -n       shows what differs from the defaults
#   smx reload          applies a change (keys marked "restart": restart smx)
#
# Unknown keys are errors. Durations are whole seconds unless the name ends
# in _ms or _us; sizes are in bytes. Relative paths are relative to the
# directory smx run is started in.
)";

const char* const tail = R"(
[routes]
# Where mail goes: recipient domain = next hop, or a list of them tried in
# order: "[host]:port" (that address, no MX lookup), "host:port" (MX lookup
# of host), or "mx" (MX lookup of the recipient domain). A key starting with
# a dot matches every subdomain; default matches every other domain.
# Without routes every domain goes by its MX, as with default = "mx"; with
# routes but no default, mail for other domains stays queued.
#default = "[192.0.2.10]:25"
#"example.net" = "[127.0.0.1]:2600"
#".example.com" = ["[10.0.0.1]:25", "[10.0.0.2]:25"]
#"example.org" = "mx"

[tls_policy]
# Recipient domain = client.tls_security_level for mail to it ("none",
# "may", "encrypt" or "verify"), matched as [routes] keys are.
#"example.net" = "encrypt"
)";

// text as "# " lines of at most 78 columns.
void comment(std::ostream& out, const std::string& text) {
    std::istringstream words(text);
    std::string word, line = "#";
    while (words >> word) {
        if (line.size() > 1 && line.size() + 1 + word.size() > 78) {
            out << line << '\n';
            line = "#";
        }
        line += " " + word;
    }
    out << line << '\n';
}

void key_lines(std::ostream& out, const smx::ConfigKey& k, const smx::Config& defaults,
               const std::map<std::string, std::string>& set) {
    comment(out, k.description + " (" + k.member.type +
                     (k.computed_default.empty() ? "" : "; default: " + k.computed_default) +
                     (k.reload == smx::Reload::restart ? "; restart)" : ")"));
    if (auto v = set.find(k.name); v != set.end())
        out << k.key() << " = " << smx::toml_string(v->second) << '\n';
    else if (!k.example.empty())
        out << '#' << k.key() << " = " << k.example << '\n';
    else
        out << (k.decide ? "" : "#") << k.key() << " = " << k.member.show(defaults) << '\n';
}

std::string config_text(const std::map<std::string, std::string>& set) {
    // The members' initial values: the same on every build machine (a key
    // whose default follows the machine, the host name, shows an example).
    const smx::Config defaults;
    std::ostringstream out;
    out << head;
    std::string_view section;
    const auto& keys = smx::config_keys();
    for (auto k = keys.begin(); k != keys.end(); ++k) {
        if (k->member.section == section) continue;
        section = k->member.section;
        out << "\n[" << section << "]\n";
        const auto end = std::find_if(k, keys.end(),
                                      [&](const auto& r) { return r.member.section != section; });
        auto decided = [&](const smx::ConfigKey& r) { return r.decide || set.count(r.name); };
        if (std::any_of(k, end, decided)) {
            for (auto r = k; r != end; ++r)
                if (decided(*r)) key_lines(out, *r, defaults, set);
            out << '\n';
        }
        for (auto r = k; r != end; ++r)
            if (!decided(*r)) key_lines(out, *r, defaults, set);
    }
    out << tail;
    return out.str();
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::cerr << "usage: make-config OUT [KEY=STRING...]\n";
        return 64;
    }
    std::map<std::string, std::string> set;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const auto eq = arg.find('=');
        if (eq == std::string::npos || !smx::find_config_key(arg.substr(0, eq))) {
            std::cerr << "make-config: '" << arg << "' is not KEY=STRING of a known key\n";
            return 64;
        }
        set[arg.substr(0, eq)] = arg.substr(eq + 1);
    }
    const std::string out = argv[1];
    std::ofstream(out) << config_text(set);
    try {
        smx::load_config(out);
    } catch (const std::exception& e) {
        std::cerr << "make-config: " << out << " does not load: " << e.what() << '\n';
        std::remove(out.c_str());
        return 1;
    }
    return 0;
}
