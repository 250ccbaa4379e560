#include "libsm/config.hpp"

#include "libsm/config_keys.hpp"
#include "libsm/domain.hpp"
#include "libsm/fd.hpp"
#include "libsm/messages.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

namespace smx {
namespace {

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

bool ip_address(const std::string& s) {
    unsigned char buf[16];
    return ::inet_pton(AF_INET, s.c_str(), buf) == 1 || ::inet_pton(AF_INET6, s.c_str(), buf) == 1;
}

std::string ClientConfig::dns_servers_csv() const {
    std::string csv;
    for (const auto& d : dns_servers) {
        if (!csv.empty()) csv += ',';
        csv += parse_hostport("client.dns_servers", d, 53).address();
    }
    return csv;
}

std::string HostPort::str() const {
    return literal ? "[" + host + "]:" + std::to_string(port) : address();
}

std::string HostPort::address() const {
    const bool v6 = host.find(':') != std::string::npos;
    return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
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

ServiceSocket parse_service_socket(const std::string& key, const std::string& s) {
    ServiceSocket sock;
    sock.text = s;
    if (s.starts_with("unix:")) {
        sock.path = s.substr(5);
        if (sock.path.empty() || sock.path[0] != '/' || sock.path.size() >= 108)
            throw ConfigError(key, "'" + s + "': unix: needs an absolute path (at most 107 octets)");
        return sock;
    }
    if (!s.starts_with("inet:") || s.size() <= 5 || s.back() == ']' ||
        s.find(':', 5) == std::string::npos)
        throw ConfigError(key, "'" + s + "' is not \"inet:host:port\" or \"unix:/path\"");
    const HostPort hp = parse_hostport(key, s.substr(5), 0);
    if (hp.port == 0) throw ConfigError(key, "'" + s + "': no port");
    sock.host = hp.host;
    sock.port = hp.port;
    return sock;
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

std::string Cidr::str() const {
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(v6 ? AF_INET6 : AF_INET, addr, buf, sizeof buf);
    return std::string(buf) + "/" + std::to_string(prefix);
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

bool AnvilConfig::counts(const std::string& ip, bool trusted) const {
    if (trusted && exempt_relay_networks) return false;
    return std::none_of(exceptions.begin(), exceptions.end(),
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

namespace {

// A routes table of thousands of domains fits many times over.
constexpr std::size_t max_config_file = 4u << 20;

toml::table parse_config_file(const std::string& path) {
    // Non-blocking: a FIFO put where the file was must not hang smx.
    const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC));
    struct stat st;
    if (!fd || ::fstat(fd.get(), &st) != 0)
        throw ConfigError(path, std::string("cannot read: ") + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) throw ConfigError(path, "is a directory, not a config file");
    if (!S_ISREG(st.st_mode)) throw ConfigError(path, "is not a regular file");
    if (static_cast<std::uint64_t>(st.st_size) > max_config_file)
        throw ConfigError(path, "is larger than 4 MiB");
    std::string text;
    if (const int err = smx::read_up_to(fd.get(), static_cast<std::size_t>(st.st_size), text))
        throw ConfigError(path, std::string("cannot read: ") + std::strerror(err));
    try {
        return toml::parse(text, path);
    } catch (const toml::parse_error& e) {
        throw ConfigError(path, std::string(e.description()) + " at line " +
                                    std::to_string(e.source().begin.line));
    }
}

// Every top-level name is a section, and every section a table.
void check_sections(const toml::table& root) {
    std::set<std::string_view> sections{"routes", "tls_policy"};
    for (const auto& k : config_keys()) sections.insert(k.member.section);
    for (const auto& [k, v] : root) {
        if (!sections.count(k.str())) throw ConfigError(std::string(k.str()), "unknown section");
        if (!v.is_table()) throw ConfigError(std::string(k.str()), "must be a table");
    }
}

// Every key of config_keys() the file gives, read through its row; returns
// their names. A key no row declares is an error, so that a typo is never
// silently a default.
std::set<std::string> read_keys(const toml::table& root, Config& c) {
    for (const auto& [section, table] : root) {
        if (section == "routes" || section == "tls_policy") continue;
        for (const auto& [key, value] : *table.as_table()) {
            const std::string name = std::string(section.str()) + "." + std::string(key.str());
            if (!find_config_key(name)) throw ConfigError(name, "unknown key");
        }
    }
    std::set<std::string> given;
    for (const auto& k : config_keys()) {
        const toml::table* t = root[k.member.section].as_table();
        const toml::node* n = t ? t->get(k.key()) : nullptr;
        if (!n) continue;
        if (!accepted(k))
            throw ConfigError(k.name, "only a test build (meson -Dtest_hooks=true) honours it");
        k.member.read(k.name, *n, c);
        given.insert(k.name);
    }
    return given;
}

// The checks across keys, after every key has been read; each names the
// key to change.

// Worst case: every recipient as long as a command line allows.
void check_envelope_limit(const ServerConfig& s) {
    const std::uint64_t worst =
        std::uint64_t{s.max_recipients} * (s.max_line_length + msg::rcpt_overhead);
    if (worst > msg::max_envelope)
        throw ConfigError("server.max_recipients",
                          std::to_string(s.max_recipients) + " recipients of up to " +
                              std::to_string(s.max_line_length) +
                              " bytes (max_line_length) make an envelope of up to " +
                              std::to_string(worst) + " bytes, over the limit of " +
                              std::to_string(msg::max_envelope) +
                              "; lower max_recipients or max_line_length");
}

void check_server_tls(const Config& c) {
    if (c.server.tls_cert.empty() != c.server.tls_key.empty())
        throw ConfigError("server.tls_key", "tls_cert and tls_key go together");
    if (c.server.tls_security_level != TlsLevel::none && c.server.tls_cert.empty())
        throw ConfigError("server.tls_security_level",
                          find_config_key("server.tls_security_level")->member.show(c) +
                              " needs tls_cert and tls_key");
}

void check_retry(const QueueConfig& q) {
    if (q.retry_max < q.retry_min) throw ConfigError("queue.retry_max", "must be >= retry_min");
}

void check_concurrency(const ClientConfig& cl) {
    if (cl.max_concurrency < cl.initial_concurrency)
        throw ConfigError("client.max_concurrency", "must be >= initial_concurrency");
}

void check_delivery_time(const Config& c) {
    if (c.queue.max_delivery_time <= c.client.delivery_timeout)
        throw ConfigError("queue.max_delivery_time",
                          "must be above client.delivery_timeout (SMTPC's own bound)");
}

void check_log_sink(const LogConfig& l) {
    if (!l.syslog.empty() && !l.file.empty())
        throw ConfigError("log.syslog", "set log.file or log.syslog, not both");
}

// No routes at all: every domain by its MX (what a postfix user expects);
// routes without a default: other domains wait ("no route").
void read_routes(const toml::table& root, Config& c) {
    const toml::table* r = root["routes"].as_table();
    if (!r || r->empty()) {
        c.default_route = Route{.mx = true, .hosts = {}};
        return;
    }
    for (const auto& [k, v] : *r) {
        const std::string key(k.str());
        Route route = parse_route("routes." + key, config_strings("routes." + key, v));
        if (key == "default") c.default_route = route;
        else c.routes[lower(key)] = route;
    }
}

// Each value read as client.tls_security_level is.
void read_tls_policy(const toml::table& root, Config& c) {
    const toml::table* t = root["tls_policy"].as_table();
    if (!t) return;
    const ConfigKey& level = *find_config_key("client.tls_security_level");
    Config scratch;
    for (const auto& [k, v] : *t) {
        const std::string key(k.str());
        level.member.read("tls_policy." + key, v, scratch);
        c.tls_policy[lower(key)] = scratch.client.tls_security_level;
    }
}

// A listener's own milters name one of server.listen's addresses.
void check_listener_milters(const Config& c) {
    for (const auto& entry : c.milter.listener_milters) {
        const std::string& where = entry.first;  // clang 14: no lambda capture of a binding
        const bool known = std::any_of(c.server.listen.begin(), c.server.listen.end(),
                                       [&](const HostPort& hp) { return hp.address() == where; });
        if (!known)
            throw ConfigError("milter.listener_milters." + where,
                              "is not an address of server.listen");
    }
}

} // namespace

const std::vector<MilterEntry>& MilterConfig::for_listener(const std::string& address) const {
    const auto it = listener_milters.find(address);
    return it != listener_milters.end() ? it->second : smtpd_milters;
}

Config load_config(const std::string& path) {
    Config c;
    c.path = path;
    const toml::table root = path.empty() ? toml::table{} : parse_config_file(path);
    check_sections(root);
    const std::set<std::string> given = read_keys(root, c);
    for (const auto& k : config_keys())
        if (k.fill && !given.count(k.name)) k.fill(c);
    check_envelope_limit(c.server);
    check_server_tls(c);
    check_store_dirs(c);
    check_retry(c.queue);
    check_concurrency(c.client);
    check_delivery_time(c);
    check_log_sink(c.log);
    check_listener_milters(c);
    read_routes(root, c);
    read_tls_policy(root, c);
    return c;
}

} // namespace smx
