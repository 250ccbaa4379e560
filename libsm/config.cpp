#include "config.hpp"

#include "build_options.hpp"

#include "domain.hpp"
#include "messages.hpp"

#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <set>
#include <toml++/toml.h>
#include <type_traits>

namespace sm {
namespace {

bool ip_address(const std::string& s) {
    unsigned char buf[16];
    return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

std::string system_hostname() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
    return buf;
}

// Reads one table strictly: every key must be known, every value typed.
class TableReader {
public:
    TableReader(const toml::table* t, std::string prefix)
        : t_(t), prefix_(std::move(prefix)) {}

    template <class T>
    std::optional<T> get(const std::string& key) {
        seen_.insert(key);
        if (!t_) return std::nullopt;
        const toml::node* n = t_->get(key);
        if (!n) return std::nullopt;
        if (auto v = n->value<T>()) {
            if constexpr (std::is_same_v<T, std::string>) no_nul(key, *v);
            return v;
        }
        throw ConfigError(name(key), "wrong type");
    }
    std::optional<std::vector<std::string>> strings(const std::string& key) {
        seen_.insert(key);
        if (!t_) return std::nullopt;
        const toml::node* n = t_->get(key);
        if (!n) return std::nullopt;
        std::vector<std::string> out;
        if (auto s = n->value<std::string>()) {
            out.push_back(no_nul(key, *s));
            return out;
        }
        const toml::array* a = n->as_array();
        if (!a) throw ConfigError(name(key), "expected a string or a list of strings");
        for (const auto& e : *a) {
            auto s = e.value<std::string>();
            if (!s) throw ConfigError(name(key), "expected a list of strings");
            out.push_back(no_nul(key, *s));
        }
        return out;
    }
    std::uint64_t positive(const std::string& key, std::uint64_t def, bool zero_ok = false) {
        auto v = get<std::int64_t>(key);
        if (!v) return def;
        if (*v < 0 || (*v == 0 && !zero_ok))
            throw ConfigError(name(key), zero_ok ? "must be >= 0" : "must be > 0");
        return static_cast<std::uint64_t>(*v);
    }
    unsigned small(const std::string& key, unsigned def, unsigned max, bool zero_ok = false) {
        auto v = positive(key, def, zero_ok);
        if (v > max) throw ConfigError(name(key), "must be <= " + std::to_string(max));
        return static_cast<unsigned>(v);
    }
    std::chrono::seconds seconds(const std::string& key, std::chrono::seconds def) {
        return std::chrono::seconds(positive(key, static_cast<std::uint64_t>(def.count())));
    }
    void check_unknown() {
        if (!t_) return;
        for (const auto& [k, v] : *t_) {
            if (!seen_.count(std::string(k.str())))
                throw ConfigError(name(std::string(k.str())), "unknown key");
        }
    }
    std::string name(const std::string& key) const { return prefix_ + "." + key; }

private:
    // TOML can spell a NUL (\u0000); no setting holds one, and the C calls
    // a value goes to (inet_pton, open) would silently stop at it.
    const std::string& no_nul(const std::string& key, const std::string& v) const {
        if (v.find('\0') != std::string::npos) throw ConfigError(name(key), "contains a NUL character");
        return v;
    }

    const toml::table* t_;
    std::string prefix_;
    std::set<std::string> seen_;
};

ClientTls parse_client_tls(const std::string& key, const std::string& v) {
    if (v == "none") return ClientTls::none;
    if (v == "may") return ClientTls::may;
    if (v == "encrypt") return ClientTls::encrypt;
    if (v == "verify") return ClientTls::verify;
    throw ConfigError(key, "must be \"none\", \"may\", \"encrypt\" or \"verify\"");
}

Route parse_route(const std::string& key, const std::vector<std::string>& vals) {
    Route r;
    if (vals.empty()) throw ConfigError(key, "empty route");
    if (vals.size() == 1 && lower(vals[0]) == "mx") {
        r.mx = true;
        return r;
    }
    for (const auto& v : vals) r.hosts.push_back(parse_hostport(key, v, 25));
    return r;
}

} // namespace

std::string ClientConfig::dns_servers_csv() const {
    std::string csv;
    for (const auto& d : dns_servers) {
        const HostPort hp = parse_hostport("client.dns_servers", d, 53);
        if (!csv.empty()) csv += ',';
        csv += (hp.host.find(':') != std::string::npos ? "[" + hp.host + "]" : hp.host) + ":" +
               std::to_string(hp.port);
    }
    return csv;
}

std::string HostPort::str() const {
    const bool v6 = host.find(':') != std::string::npos;
    if (literal || v6) return "[" + host + "]:" + std::to_string(port);
    return host + ":" + std::to_string(port);
}

HostPort parse_hostport(const std::string& key, const std::string& s,
                        std::uint16_t default_port) {
    HostPort hp;
    hp.port = default_port;
    std::string rest;
    if (!s.empty() && s[0] == '[') {
        const auto close = s.find(']');
        if (close == std::string::npos) throw ConfigError(key, "missing ']' in '" + s + "'");
        hp.host = s.substr(1, close - 1);
        hp.literal = true;
        rest = s.substr(close + 1);
    } else {
        const auto colon = s.rfind(':');
        if (colon != std::string::npos && s.find(':') == colon) {
            hp.host = s.substr(0, colon);
            rest = s.substr(colon);
        } else {
            hp.host = s;
        }
    }
    if (hp.host.empty()) throw ConfigError(key, "empty host in '" + s + "'");
    if (!rest.empty()) {
        if (rest[0] != ':' || rest.size() < 2 || rest.size() > 6 ||
            !std::all_of(rest.begin() + 1, rest.end(), ::isdigit))
            throw ConfigError(key, "bad port in '" + s + "'");
        const long p = std::stol(rest.substr(1));
        if (p < 1 || p > 65535) throw ConfigError(key, "port out of range in '" + s + "'");
        hp.port = static_cast<std::uint16_t>(p);
    }
    return hp;
}

Cidr parse_cidr(const std::string& key, const std::string& s) {
    Cidr c;
    const auto slash = s.find('/');
    const std::string addr = s.substr(0, slash);
    if (::inet_pton(AF_INET, addr.c_str(), c.addr) == 1) {
        c.prefix = 32;
    } else if (::inet_pton(AF_INET6, addr.c_str(), c.addr) == 1) {
        c.v6 = true;
        c.prefix = 128;
    } else {
        throw ConfigError(key, "bad address in '" + s + "'");
    }
    if (slash != std::string::npos) {
        const std::string p = s.substr(slash + 1);
        if (p.empty() || p.size() > 3 || !std::all_of(p.begin(), p.end(), ::isdigit) ||
            std::stoul(p) > c.prefix)
            throw ConfigError(key, "bad prefix length in '" + s + "'");
        c.prefix = static_cast<unsigned>(std::stoul(p));
    }
    return c;
}

bool Cidr::contains(const std::string& a) const {
    unsigned char buf[16] = {};
    const unsigned char* bytes = buf;
    if (::inet_pton(AF_INET, a.c_str(), buf) == 1) {
        if (v6) return false;
    } else if (::inet_pton(AF_INET6, a.c_str(), buf) == 1) {
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (!v6) {
            if (std::memcmp(buf, mapped, 12) != 0) return false;
            bytes = buf + 12;
        }
    } else {
        return false;
    }
    const unsigned full = prefix / 8, bits = prefix % 8;
    if (std::memcmp(bytes, addr, full) != 0) return false;
    if (bits == 0) return true;
    const unsigned char mask = static_cast<unsigned char>(0xff << (8 - bits));
    return (bytes[full] & mask) == (addr[full] & mask);
}

std::vector<std::string> Route::nexthops() const {
    if (mx) return {"mx"};
    std::vector<std::string> out;
    for (const auto& h : hosts) out.push_back(h.str());
    return out;
}

bool ServerConfig::in_relay_networks(const std::string& ip) const {
    return std::any_of(relay_networks.begin(), relay_networks.end(),
                       [&](const Cidr& c) { return c.contains(ip); });
}

const std::string& ServerConfig::user_for(Process p) const {
    if (!user.empty()) return user;
    switch (p) {
    case Process::smtps: return smtps_user;
    case Process::smtpc: return smtpc_user;
    case Process::qmgr: break;
    }
    return qmgr_user;
}

namespace {
// The entry for a domain: exact, then ".parent" entries, which match every
// subdomain, as in postfix transport maps.
template <class T>
const T* find_domain(const std::map<std::string, T>& m, const std::string& domain_in) {
    const std::string domain = lower(domain_in);
    if (auto it = m.find(domain); it != m.end()) return &it->second;
    for (auto dot = domain.find('.'); dot != std::string::npos;
         dot = domain.find('.', dot + 1)) {
        if (auto it = m.find(domain.substr(dot)); it != m.end()) return &it->second;
    }
    return nullptr;
}
} // namespace

const Route* Config::route_for(const std::string& domain) const {
    if (const Route* r = find_domain(routes, domain)) return r;
    return default_route ? &*default_route : nullptr;
}

ClientTls Config::tls_for(const std::string& domain) const {
    const ClientTls* t = find_domain(tls_policy, domain);
    return t ? *t : client.tls_security_level;
}

namespace {

// Relative to the directory smx run started in; "a/b/" is "a/b".
std::string absolute_dir(const std::string& dir) {
    std::filesystem::path p = std::filesystem::absolute(dir).lexically_normal();
    if (!p.has_filename() && p != p.root_path()) p = p.parent_path();
    return p.string();
}

// a lies strictly below b (both absolute_dir()s): compared as written, so a
// symbolic link can still join two stores; QMGR copies where a rename fails.
bool below(const std::string& a, const std::string& b) {
    return a.size() > b.size() && a.compare(0, b.size(), b) == 0 &&
           (b.back() == '/' || a[b.size()] == '/');
}

// The stores must not share a directory: the orphan sweep lists every file
// under content_dir, IBDB recovery every log file under ibdb_dir, and DEFEDB
// owns its environment. Moved out of the spool they must not hold it either.
void check_store_dirs(const Config& c) {
    const std::string spool = c.spool_dir_abs();
    struct Store {
        const char* key;
        std::string dir;
        bool set;  // named in the file: the key to blame
    };
    const Store stores[] = {
        {"queue.content_dir", c.content_dir_abs(), !c.queue.content_dir.empty()},
        {"queue.ibdb_dir", c.ibdb_dir_abs(), !c.queue.ibdb_dir.empty()},
        {"the deferred queue", c.defedb_dir_abs(), false},
        {"the quarantine", c.quarantine_dir_abs(), false},
        {"the maildrop", c.maildrop_dir_abs(), false},
        {"the maildrop quarantine", c.maildrop_quarantine_dir_abs(), false},
    };
    for (const auto& s : stores) {
        if (!s.set) continue;
        if (s.dir == spool || below(spool, s.dir))
            throw ConfigError(s.key, "\"" + s.dir + "\" is or holds queue.spool_dir (" + spool +
                                         "): give it a directory of its own");
        // Inside the spool smx run makes it (with owner and mode); deeper
        // down it would have to make the steps between too.
        if (below(s.dir, spool) && std::filesystem::path(s.dir).parent_path() != spool)
            throw ConfigError(s.key, "\"" + s.dir + "\" is inside queue.spool_dir but not directly "
                                     "in it: use " + spool + "/<name> or a directory outside");
    }
    for (std::size_t i = 0; i < std::size(stores); ++i) {
        for (std::size_t j = i + 1; j < std::size(stores); ++j) {
            const Store& a = stores[i];
            const Store& b = stores[j];
            if (a.dir != b.dir && !below(a.dir, b.dir) && !below(b.dir, a.dir)) continue;
            const Store& blame = b.set ? b : a;
            const Store& other = b.set ? a : b;
            throw ConfigError(blame.key, "\"" + blame.dir + "\" " +
                                             (blame.dir == other.dir ? "is the same directory as "
                                              : below(blame.dir, other.dir) ? "lies inside "
                                                                              : "holds ") +
                                             other.key + " (" + other.dir +
                                             "): each store needs a directory of its own");
        }
    }
}

} // namespace

std::string Config::run_dir_abs() const { return absolute_dir(queue.run_dir); }
std::string Config::spool_dir_abs() const { return absolute_dir(queue.spool_dir); }
std::string Config::content_dir_abs() const {
    return queue.content_dir.empty() ? in_spool("cdb") : absolute_dir(queue.content_dir);
}
std::string Config::ibdb_dir_abs() const {
    return queue.ibdb_dir.empty() ? in_spool("ibdb") : absolute_dir(queue.ibdb_dir);
}
std::string Config::defedb_dir_abs() const { return in_spool("defedb"); }
std::string Config::quarantine_dir_abs() const { return in_spool("quarantine"); }
std::string Config::maildrop_dir_abs() const { return in_spool("maildrop"); }
std::string Config::maildrop_quarantine_dir_abs() const { return in_spool("maildrop-quarantine"); }
std::string Config::in_spool(const char* name) const {
    return (std::filesystem::path(spool_dir_abs()) / name).string();
}

Config load_config(const std::string& path) {
    Config c;
    c.path = path;
    toml::table root;
    if (!path.empty()) {
        try {
            root = toml::parse_file(path);
        } catch (const toml::parse_error& e) {
            const auto& src = e.source();
            throw ConfigError(path, std::string(e.description()) + " at line " +
                                        std::to_string(src.begin.line));
        }
    }
    for (const auto& [k, v] : root) {
        static const std::set<std::string> sections{"server", "queue", "client",
                                                    "log", "stats", "routes",
                                                    "tls_policy"};
        if (!sections.count(std::string(k.str())))
            throw ConfigError(std::string(k.str()), "unknown section");
        if (!v.is_table()) throw ConfigError(std::string(k.str()), "must be a table");
    }

    TableReader s(root["server"].as_table(), "server");
    if (auto v = s.strings("listen")) {
        c.server.listen.clear();
        for (const auto& l : *v) c.server.listen.push_back(parse_hostport("server.listen", l, 25));
        if (c.server.listen.empty()) throw ConfigError("server.listen", "needs at least one address");
    }
    c.server.hostname = s.get<std::string>("hostname").value_or(system_hostname());
    if (c.server.hostname.empty()) throw ConfigError("server.hostname", "must not be empty");
    c.server.max_message_size = s.positive("max_message_size", c.server.max_message_size);
    c.server.max_recipients = s.small("max_recipients", c.server.max_recipients, 100000);
    for (const auto& n : s.strings("relay_networks").value_or(
             std::vector<std::string>{"127.0.0.0/8", "::1/128"}))
        c.server.relay_networks.push_back(parse_cidr("server.relay_networks", n));
    for (const auto& d : s.strings("relay_domains").value_or(std::vector<std::string>{}))
        c.server.relay_domains.push_back(lower(d));
    c.server.max_connections = s.small("max_connections", c.server.max_connections, 1000000);
    c.server.max_connections_per_client =
        s.small("max_connections_per_client", c.server.max_connections_per_client, 1000000);
    c.server.command_timeout = s.seconds("command_timeout", c.server.command_timeout);
    c.server.max_transactions = s.small("max_transactions", c.server.max_transactions, 1000000, true);
    c.server.transaction_wait = std::chrono::milliseconds(
        s.small("transaction_wait_ms", static_cast<unsigned>(c.server.transaction_wait.count()),
                60000, true));
    c.server.data_timeout = s.seconds("data_timeout", c.server.data_timeout);
    c.server.min_data_rate = s.small("min_data_rate", c.server.min_data_rate, 1u << 30, true);
    c.server.allow_untrusted_routing =
        s.get<bool>("allow_untrusted_routing").value_or(c.server.allow_untrusted_routing);
    c.server.max_errors = s.small("max_errors", c.server.max_errors, 1000);
    c.server.max_junk_commands =
        s.small("max_junk_commands", c.server.max_junk_commands, 1000000, true);
    c.server.max_hops = s.small("max_hops", c.server.max_hops, 1000);
    c.server.max_line_length = s.small("max_line_length", c.server.max_line_length, 65536);
    if (c.server.max_line_length < 512)
        throw ConfigError("server.max_line_length", "must be >= 512 (RFC 5321)");
    // Worst case: every recipient as long as a command line allows.
    const std::uint64_t worst = std::uint64_t{c.server.max_recipients} *
                                (c.server.max_line_length + msg::rcpt_overhead);
    if (worst > msg::max_envelope)
        throw ConfigError("server.max_recipients",
                          std::to_string(c.server.max_recipients) + " recipients of up to " +
                              std::to_string(c.server.max_line_length) +
                              " bytes (max_line_length) make an envelope of up to " +
                              std::to_string(worst) + " bytes, over the limit of " +
                              std::to_string(msg::max_envelope) +
                              "; lower max_recipients or max_line_length");
    if (auto b = s.get<std::string>("bare_lf")) {
        if (*b == "reject") c.server.reject_bare_lf = true;
        else if (*b == "normalize" || *b == "normalise") c.server.reject_bare_lf = false;
        else throw ConfigError("server.bare_lf", "must be \"reject\" or \"normalize\"");
    }
    c.server.tls_cert = s.get<std::string>("tls_cert").value_or("");
    c.server.tls_key = s.get<std::string>("tls_key").value_or("");
    if (c.server.tls_cert.empty() != c.server.tls_key.empty())
        throw ConfigError("server.tls_key", "tls_cert and tls_key go together");
    if (!c.server.tls_cert.empty()) c.server.tls_security_level = TlsLevel::may;
    if (auto l = s.get<std::string>("tls_security_level")) {
        if (*l == "none") c.server.tls_security_level = TlsLevel::none;
        else if (*l == "may") c.server.tls_security_level = TlsLevel::may;
        else if (*l == "encrypt") c.server.tls_security_level = TlsLevel::encrypt;
        else throw ConfigError("server.tls_security_level",
                               "must be \"none\", \"may\" or \"encrypt\"");
        if (*l != "none" && c.server.tls_cert.empty())
            throw ConfigError("server.tls_security_level",
                              "\"" + *l + "\" needs tls_cert and tls_key");
    }
    c.server.threads = s.small("threads", c.server.threads, 64, true);
    c.server.processes = s.small("processes", c.server.processes, max_smtps_processes, true);
    c.server.user = s.get<std::string>("user").value_or("");
    for (auto [key, v] : {std::pair{"smtps_user", &c.server.smtps_user},
                          std::pair{"qmgr_user", &c.server.qmgr_user},
                          std::pair{"smtpc_user", &c.server.smtpc_user},
                          std::pair{"group", &c.server.group},
                          std::pair{"maildrop_group", &c.server.maildrop_group}}) {
        *v = s.get<std::string>(key).value_or(*v);
        if (v->empty()) throw ConfigError(s.name(key), "must not be empty");
    }
    c.server.admin_group = s.get<std::string>("admin_group").value_or("");
    c.server.stats_group = s.get<std::string>("stats_group").value_or("");
    s.check_unknown();

    TableReader q(root["queue"].as_table(), "queue");
    c.queue.spool_dir = q.get<std::string>("spool_dir").value_or(c.queue.spool_dir);
    c.queue.run_dir = q.get<std::string>("run_dir").value_or(c.queue.run_dir);
    if (c.queue.spool_dir.empty()) throw ConfigError("queue.spool_dir", "must not be empty");
    if (c.queue.run_dir.empty()) throw ConfigError("queue.run_dir", "must not be empty");
    c.queue.content_dir = q.get<std::string>("content_dir").value_or("");
    c.queue.ibdb_dir = q.get<std::string>("ibdb_dir").value_or("");
    check_store_dirs(c);
    if (auto p = q.get<std::string>("commit_policy")) {
        if (*p != "adaptive" && *p != "fixed")
            throw ConfigError("queue.commit_policy", "must be \"adaptive\" or \"fixed\"");
        c.queue.commit_adaptive = *p == "adaptive";
    }
    c.queue.commit_interval = std::chrono::microseconds(
        q.positive("commit_interval_us", c.queue.commit_interval.count(), true));
    if (c.queue.commit_interval > std::chrono::seconds(10))
        throw ConfigError("queue.commit_interval_us", "must be <= 10000000");
    c.queue.commit_max_batch = q.small("commit_max_batch", c.queue.commit_max_batch, 100000);
    c.queue.ibdb_file_size = q.positive("ibdb_file_size", c.queue.ibdb_file_size);
    c.queue.cdb_hashed = q.get<bool>("cdb_hashed").value_or(c.queue.cdb_hashed);
    c.queue.content_segments =
        q.get<bool>("content_segments").value_or(c.queue.content_segments);
    if (auto v = q.get<std::string>("content_sync")) {
        if (*v == "batch") c.queue.content_sync = QueueConfig::ContentSync::batch;
        else if (*v == "file") c.queue.content_sync = QueueConfig::ContentSync::file;
        else throw ConfigError("queue.content_sync", "must be \"batch\" or \"file\"");
    }
    if (auto v = q.get<std::int64_t>("test_segment_age")) {
        if (!SMX_TEST_HOOKS)
            throw ConfigError("queue.test_segment_age",
                              "only a test build (meson -Dtest_hooks=true) honours it");
        if (*v < 3 || *v > 3600) throw ConfigError("queue.test_segment_age", "must be 3..3600");
        c.queue.segment_age = std::chrono::seconds(*v);
    }
    c.queue.test_no_sync = q.get<bool>("test_no_sync").value_or(false);
    if (c.queue.test_no_sync && !SMX_TEST_HOOKS)
        throw ConfigError("queue.test_no_sync",
                          "only a test build (meson -Dtest_hooks=true) honours it: it gives "
                          "up durability, for perf experiments");
    c.queue.aq_max_entries = q.small("aq_max_entries", c.queue.aq_max_entries, 100000000);
    c.queue.retry_min = q.seconds("retry_min", c.queue.retry_min);
    c.queue.retry_max = q.seconds("retry_max", c.queue.retry_max);
    if (c.queue.retry_max < c.queue.retry_min)
        throw ConfigError("queue.retry_max", "must be >= retry_min");
    c.queue.max_queue_lifetime = q.seconds("max_queue_lifetime", c.queue.max_queue_lifetime);
    c.queue.min_free_space = q.positive("min_free_space", c.queue.min_free_space, true);
    c.queue.orphan_age = q.seconds("orphan_age", c.queue.orphan_age);
    c.queue.delay_warning_time = std::chrono::seconds(q.positive(
        "delay_warning_time", static_cast<std::uint64_t>(c.queue.delay_warning_time.count()), true));
    c.queue.max_delivery_time = q.seconds("max_delivery_time", c.queue.max_delivery_time);
    c.queue.soft_bounce = q.get<bool>("soft_bounce").value_or(c.queue.soft_bounce);
    c.queue.bounce_untrusted = q.get<bool>("bounce_untrusted").value_or(c.queue.bounce_untrusted);
    // SMTPS fdatasyncs a file, renames it and commits it: far less than
    // this unless the disk hangs.
    if (c.queue.orphan_age < std::chrono::seconds(10))
        throw ConfigError("queue.orphan_age", "must be >= 10");
    q.check_unknown();

    TableReader cl(root["client"].as_table(), "client");
    c.client.connect_timeout = cl.seconds("connect_timeout", c.client.connect_timeout);
    c.client.command_timeout = cl.seconds("command_timeout", c.client.command_timeout);
    c.client.idle_timeout = cl.seconds("idle_timeout", c.client.idle_timeout);
    c.client.delivery_timeout = cl.seconds("delivery_timeout", c.client.delivery_timeout);
    c.client.max_msgs_per_connection =
        cl.small("max_msgs_per_connection", c.client.max_msgs_per_connection, 1000000);
    c.client.initial_concurrency =
        cl.small("initial_concurrency", c.client.initial_concurrency, 10000);
    c.client.max_concurrency = cl.small("max_concurrency", c.client.max_concurrency, 10000);
    if (c.client.max_concurrency < c.client.initial_concurrency)
        throw ConfigError("client.max_concurrency", "must be >= initial_concurrency");
    c.client.rate_limit = cl.small("rate_limit", c.client.rate_limit, 1000000, true);
    c.client.rate_interval = cl.seconds("rate_interval", c.client.rate_interval);
    c.client.helo_name = cl.get<std::string>("helo_name").value_or(c.server.hostname);
    if (auto l = cl.get<std::string>("tls_security_level"))
        c.client.tls_security_level = parse_client_tls("client.tls_security_level", *l);
    c.client.tls_ca_file = cl.get<std::string>("tls_ca_file").value_or("");
    c.client.sasl_password_file = cl.get<std::string>("sasl_password_file").value_or("");
    c.client.smtp_port = static_cast<std::uint16_t>(cl.small("smtp_port", 25, 65535));
    if (auto v = cl.strings("dns_servers")) {
        for (const auto& d : *v) {
            const HostPort hp = parse_hostport("client.dns_servers", d, 53);
            if (!ip_address(hp.host))
                throw ConfigError("client.dns_servers", "'" + d + "' is not an IP address[:port]");
            c.client.dns_servers.push_back(d);
        }
    }
    cl.check_unknown();
    if (c.queue.max_delivery_time <= c.client.delivery_timeout)
        throw ConfigError("queue.max_delivery_time",
                          "must be above client.delivery_timeout (SMTPC's own bound)");

    TableReader lg(root["log"].as_table(), "log");
    c.log.level = lg.get<std::string>("level").value_or(c.log.level);
    static const std::set<std::string> levels{"trace", "debug", "info", "warn",
                                              "error", "critical", "off"};
    if (!levels.count(c.log.level))
        throw ConfigError("log.level", "must be one of trace, debug, info, warn, error, off");
    c.log.file = lg.get<std::string>("file").value_or("");
    c.log.syslog = lg.get<std::string>("syslog").value_or("");
    if (!c.log.syslog.empty() && !c.log.file.empty())
        throw ConfigError("log.syslog", "set log.file or log.syslog, not both");
    const std::string facility = lg.get<std::string>("syslog_facility").value_or("mail");
    // RFC 5424's codes of the facilities a mail system would log to.
    static const std::map<std::string, int> facilities{
        {"mail", 2},    {"daemon", 3},  {"local0", 16}, {"local1", 17}, {"local2", 18},
        {"local3", 19}, {"local4", 20}, {"local5", 21}, {"local6", 22}, {"local7", 23}};
    const auto f = facilities.find(facility);
    if (f == facilities.end())
        throw ConfigError("log.syslog_facility", "must be mail, daemon or local0 ... local7");
    c.log.syslog_facility = f->second;
    lg.check_unknown();

    TableReader st(root["stats"].as_table(), "stats");
    c.stats.listen = st.get<std::string>("listen").value_or("");
    if (!c.stats.listen.empty()) parse_hostport("stats.listen", c.stats.listen, 9525);
    st.check_unknown();

    // No routes at all: every domain by its MX (what a postfix user expects);
    // routes without a default: other domains wait ("no route").
    if (const toml::table* r = root["routes"].as_table(); r && !r->empty()) {
        TableReader rr(r, "routes");
        for (const auto& [k, v] : *r) {
            const std::string key(k.str());
            auto vals = rr.strings(key);
            Route route = parse_route("routes." + key, *vals);
            if (key == "default") c.default_route = route;
            else c.routes[lower(key)] = route;
        }
    } else {
        c.default_route = Route{.mx = true, .hosts = {}};
    }
    if (const toml::table* t = root["tls_policy"].as_table()) {
        TableReader tr(t, "tls_policy");
        for (const auto& [k, v] : *t) {
            const std::string key(k.str());
            c.tls_policy[lower(key)] =
                parse_client_tls("tls_policy." + key, *tr.get<std::string>(key));
        }
    }
    return c;
}

} // namespace sm
