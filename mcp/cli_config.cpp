#include "mcp/cli_config.hpp"

#include "mcp/privsep.hpp"
#include "mcp/secret_files.hpp"

#include "libsm/config_keys.hpp"
#include "libsm/limits.hpp"
#include "libsm/lookup_table.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace smx::mcp {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

// dir can be made: the nearest part of it that exists is a directory we may
// write (an existing dir needs nothing). smx run makes it and the steps to it.
bool can_make_dir(const std::string& key, const fs::path& dir, std::string& err) {
    fs::path p = dir;
    struct stat st;
    while (::stat(p.c_str(), &st) != 0) {
        if ((errno != ENOENT && errno != ENOTDIR) || p == p.root_path()) {
            err = key + ": cannot reach " + p.string() + ": " + errno_text();
            return false;
        }
        p = p.parent_path();
    }
    if (!S_ISDIR(st.st_mode)) {
        err = key + ": " + p.string() + " is not a directory";
        return false;
    }
    if (p != dir && ::access(p.c_str(), W_OK) != 0) {
        err = key + ": cannot create " + dir.string() + " in " + p.string() + ": " + errno_text();
        return false;
    }
    return true;
}

// As smx run opens it: appended to, created if missing, never through a
// symbolic link.
bool can_open_log(const std::string& file, std::string& err) {
    const fs::path path = fs::absolute(file);
    struct stat st;
    if (::stat(path.parent_path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
        err = "log.file: the directory of " + file + ", " + path.parent_path().string() +
              ", does not exist";
        return false;
    }
    if (::lstat(path.c_str(), &st) != 0) {
        if (::access(path.parent_path().c_str(), W_OK) == 0) return true;
        err = "log.file: cannot create " + file + ": " + errno_text();
        return false;
    }
    if (S_ISLNK(st.st_mode)) {
        err = "log.file: " + file + " is a symbolic link; smx refuses to use it";
        return false;
    }
    if (!S_ISREG(st.st_mode)) {
        err = "log.file: " + file + " is not a regular file";
        return false;
    }
    if (::access(path.c_str(), W_OK) != 0) {
        err = "log.file: cannot write " + file + ": " + errno_text();
        return false;
    }
    return true;
}

// A host name as DNS has it: dot-separated labels of 1 to 63 letters,
// digits, '-' and '_' (UTF-8 bytes count as letters), at most 253 in all.
bool domain_name(std::string_view d) {
    if (d.empty() || d.size() > 253) return false;
    std::size_t label = 0;
    char last = '.';
    for (const char c : d) {
        if (c == '.') {
            if (label == 0 || last == '-') return false;
            label = 0;
        } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '_' ||
                   static_cast<unsigned char>(c) >= 0x80 || (c == '-' && label > 0)) {
            if (++label > 63) return false;
        } else {
            return false;
        }
        last = c;
    }
    return label > 0 && last != '-';
}

// A domain table's key: a domain, ".domain" for its subdomains, or an
// address literal ("[192.0.2.1]", as mail to user@[192.0.2.1] has it).
std::optional<std::string> bad_domain_key(const std::string& key, const std::string& d) {
    const std::string_view name = !d.empty() && d[0] == '.' ? std::string_view(d).substr(1) : d;
    const bool literal = d.size() > 2 && d.front() == '[' && d.back() == ']' &&
                         smx::ip_address(d.substr(1, d.size() - 2));
    if (domain_name(name) || literal) return std::nullopt;
    std::string w = key + ": \"" + d + "\" is not a domain name, so no mail matches it";
    if (d.starts_with("*."))
        w += " (\"" + d.substr(1) + "\" matches every subdomain of " + d.substr(2) + ")";
    return w;
}

// The network an address/prefix names: its host bits cleared.
smx::Cidr network_of(smx::Cidr c) {
    const unsigned bytes = c.v6 ? 16 : 4;
    for (unsigned i = 0; i < bytes; ++i) {
        const unsigned bit = i * 8;
        if (bit >= c.prefix) c.addr[i] = 0;
        else if (c.prefix - bit < 8)
            c.addr[i] &= static_cast<unsigned char>(0xff << (8 - (c.prefix - bit)));
    }
    return c;
}

// An open relay, or most of one: every address, or more than a /8 of IPv4
// (a v4-mapped IPv6 network counts as the IPv4 one) or a /16 of IPv6.
std::optional<std::string> too_wide(const smx::Cidr& c) {
    static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    const bool v4 = !c.v6 || (c.prefix >= 96 && std::memcmp(c.addr, mapped, 12) == 0);
    const unsigned prefix = c.v6 && v4 ? c.prefix - 96 : c.prefix;
    const unsigned shortest = v4 ? 8 : 16;
    const std::string family = v4 ? "IPv4" : "IPv6";
    const std::string what = "server.relay_networks: \"" + c.str() + "\" ";
    const std::string relay = "may relay through smx to any domain";
    if (prefix == 0)
        return what + "is every " + family + " address: anyone on the Internet " + relay +
               " (an open relay)";
    if (prefix < shortest)
        return what + "is 1/" + std::to_string(1u << prefix) + " of all " + family +
               " addresses (shorter than /" + std::to_string(shortest) + "): every client in it " +
               relay + ", close to an open relay; list only your own networks";
    return std::nullopt;
}

std::string route_value(const smx::Route& r) {
    const auto hops = r.nexthops();
    if (r.mx) return smx::toml_string(hops.front());
    std::string out = "[";
    for (std::size_t i = 0; i < hops.size(); ++i) out += (i ? ", " : "") + smx::toml_string(hops[i]);
    return out + "]";
}

// "routes.example.net" as a TOML dotted key: a part that is not a bare key
// is quoted.
std::string toml_key(const std::string& name) {
    const auto dot = name.find('.');
    const std::string part = name.substr(dot + 1);
    const bool bare = !part.empty() && std::all_of(part.begin(), part.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
    });
    return name.substr(0, dot + 1) + (bare ? part : smx::toml_string(part));
}

// What smx run refuses besides load_checked, checked as smx run by the same
// user would: a key only root may read passes for root and fails for anyone
// else; the children's accounts matter only to root.
bool runnable(const smx::Config& cfg, std::string& why) {
    if (!read_secrets(cfg, why)) return false;
    lookup_accounts(cfg, why);
    return why.empty() && check_paths(cfg, why) && check_tables(cfg, why);
}

void print_summary(const smx::Config& cfg, std::ostream& out) {
    out << "listen: ";
    for (std::size_t i = 0; i < cfg.server.listen.size(); ++i)
        out << (i ? ", " : "") << cfg.server.listen[i].str();
    out << "\nspool:  " << cfg.spool_dir_abs()
        << (cfg.queue.cdb_hashed ? " (cdb hashed)" : " (cdb flat)") << '\n';
    out << "cdb:    " << cfg.content_dir_abs() << '\n';
    out << "ibdb:   " << cfg.ibdb_dir_abs() << '\n';
    out << "run:    " << cfg.run_dir_abs() << '\n';
    out << "routes: ";
    std::string sep;
    for (const auto& [domain, route] : cfg.routes) {
        out << sep << domain << " = ";
        for (std::size_t i = 0; i < route.nexthops().size(); ++i)
            out << (i ? " " : "") << route.nexthops()[i];
        sep = ", ";
    }
    if (cfg.default_route) {
        out << sep << "default = ";
        for (std::size_t i = 0; i < cfg.default_route->nexthops().size(); ++i)
            out << (i ? " " : "") << cfg.default_route->nexthops()[i];
    } else {
        out << sep << "no default (mail without a route is deferred)";
    }
    out << '\n';
}

} // namespace

bool check_paths(const smx::Config& cfg, std::string& err) {
    const auto& q = cfg.queue;
    // content_dir and ibdb_dir left empty are in the spool.
    if (!can_make_dir("queue.spool_dir", cfg.spool_dir_abs(), err) ||
        !can_make_dir("queue.run_dir", cfg.run_dir_abs(), err) ||
        (!q.content_dir.empty() &&
         !can_make_dir("queue.content_dir", cfg.content_dir_abs(), err)) ||
        (!q.ibdb_dir.empty() && !can_make_dir("queue.ibdb_dir", cfg.ibdb_dir_abs(), err)))
        return false;
    return cfg.log.file.empty() || can_open_log(cfg.log.file, err);
}

bool check_tables(const smx::Config& cfg, std::string& err) {
    for (const auto& [key, spec] : smx::config_tables(cfg)) {
        try {
            smx::table::open(spec);
        } catch (const smx::table::TableError& e) {
            err = key + ": " + e.what();
            if ((spec.starts_with("hash:") || spec.starts_with("btree:")) &&
                err.ends_with(".db: No such file or directory"))
                err += " (build it with: smx map build " + spec + ")";
            return false;
        }
    }
    return true;
}

std::vector<std::string> config_warnings(const smx::Config& cfg) {
    std::vector<std::string> out;
    for (const auto& n : cfg.server.relay_networks) {
        if (auto w = too_wide(n)) out.push_back(*w);
        const smx::Cidr net = network_of(n);
        if (net.str() != n.str())
            out.push_back("server.relay_networks: \"" + n.str() +
                          "\" has host bits set: it means " + net.str() +
                          ", every address of which may relay; write \"" + net.str() +
                          "\", or \"" + n.str().substr(0, n.str().find('/')) + "/" +
                          (n.v6 ? "128" : "32") + "\" for the one host");
    }
    for (const auto& d : cfg.server.relay_domains)
        if (auto w = bad_domain_key("server.relay_domains", d)) out.push_back(*w);
    auto hosts = [&](const std::string& key, const smx::Route& route) {
        for (const auto& h : route.hosts)
            if (!domain_name(h.host) && !smx::ip_address(h.host))
                out.push_back(key + ": \"" + h.host + "\" is neither a host name nor an address");
    };
    for (const auto& [domain, route] : cfg.routes) {
        const std::string key = toml_key("routes." + domain);
        if (auto w = bad_domain_key(key, domain)) out.push_back(*w);
        hosts(key, route);
    }
    if (cfg.default_route) hosts("routes.default", *cfg.default_route);
    for (const auto& [domain, level] : cfg.tls_policy)
        if (auto w = bad_domain_key(toml_key("tls_policy." + domain), domain)) out.push_back(*w);
    return out;
}

int check_config(const std::string& path, std::ostream& out, std::ostream& err,
                 const std::string& source) {
    auto cfg = load_checked(path, err);
    if (!cfg) return exit_config;
    std::string why;
    if (!runnable(*cfg, why)) {
        err << "smx: config error: " << why << '\n';
        return exit_config;
    }
    out << "config OK ("
        << (!source.empty() ? source : path.empty() ? "built-in defaults" : path) << ")\n";
    print_summary(*cfg, out);
    for (const auto& w : config_warnings(*cfg)) err << "smx: warning: " << w << '\n';
    // What `smx run` from this shell would get (a service manager may set
    // another limit: LimitNOFILE=).
    std::string warning;
    smx::smtps_layout(cfg->server, smx::raise_nofile(), warning);
    if (!warning.empty()) err << "smx: warning: " << warning << '\n';
    return exit_ok;
}

std::vector<std::pair<std::string, std::string>> config_entries(const smx::Config& cfg) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& k : smx::config_keys())
        if (smx::accepted(k)) out.emplace_back(k.name, k.member.show(cfg));
    for (const auto& [domain, route] : cfg.routes)
        out.emplace_back("routes." + domain, route_value(route));
    if (cfg.default_route) out.emplace_back("routes.default", route_value(*cfg.default_route));
    for (const auto& [domain, level] : cfg.tls_policy) {
        smx::Config one;
        one.client.tls_security_level = level;
        out.emplace_back("tls_policy." + domain,
                         smx::find_config_key("client.tls_security_level")->member.show(one));
    }
    return out;
}

std::vector<std::pair<std::string, std::string>> changed_entries(const smx::Config& cfg) {
    const auto defaults = config_entries(smx::load_config(""));
    std::vector<std::pair<std::string, std::string>> out;
    // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
    for (const auto& entry : config_entries(cfg)) {
        const std::string& name = entry.first;
        const std::string& value = entry.second;
        std::optional<std::string> def;
        if (const smx::ConfigKey* k = smx::find_config_key(name); k && k->fill) {
            smx::Config without = cfg;
            k->fill(without);
            def = k->member.show(without);
        } else if (auto d = std::find_if(defaults.begin(), defaults.end(),
                                         [&](const auto& e) { return e.first == name; });
                   d != defaults.end()) {
            def = d->second;
        }
        if (value != def) out.emplace_back(name, value);
    }
    return out;
}

int config_command(const Args& args, std::ostream& out, std::ostream& err) {
    std::optional<smx::Config> cfg;
    if (args.defaults) cfg = smx::load_config("");
    else cfg = load_checked(args.config_path, err);
    if (!cfg) return exit_config;
    const auto all = config_entries(*cfg);
    const auto shown = args.changed ? changed_entries(*cfg) : all;
    auto line = [&](const std::pair<std::string, std::string>& e) {
        out << toml_key(e.first) << " = " << e.second << '\n';
    };
    if (args.operands.empty()) {
        for (const auto& e : shown) line(e);
        return exit_ok;
    }
    auto named = [](const std::string& key) {
        return [&key](const auto& e) { return e.first == key || toml_key(e.first) == key; };
    };
    for (const auto& key : args.operands) {
        if (std::none_of(all.begin(), all.end(), named(key))) {
            err << "smx: config: unknown key '" << key << "'"
                << (key.find('.') == std::string::npos ? " (keys are section.key: server.listen)"
                                                       : "")
                << '\n';
            return exit_failed;
        }
    }
    for (const auto& key : args.operands) {
        const auto e = std::find_if(shown.begin(), shown.end(), named(key));
        if (e != shown.end()) line(*e);
    }
    return exit_ok;
}

} // namespace smx::mcp
