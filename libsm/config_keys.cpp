#include "libsm/config_keys.hpp"

#include "libsm/build_options.hpp"

#include "libsm/domain.hpp"
#include "libsm/json.hpp"
#include "libsm/lookup_table.hpp"
#include "libsm/milter_protocol.hpp"
#include "libsm/panic.hpp"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <limits>
#include <type_traits>

namespace smx {
namespace {

// Where each section's struct lives in Config, and its name there.
template <class S> struct Section;
template <class S, S Config::*P> struct In {
    static constexpr S Config::*part = P;
};
template <> struct Section<ServerConfig> : In<ServerConfig, &Config::server> {
    static constexpr std::string_view name = "server";
};
template <> struct Section<QueueConfig> : In<QueueConfig, &Config::queue> {
    static constexpr std::string_view name = "queue";
};
template <> struct Section<ClientConfig> : In<ClientConfig, &Config::client> {
    static constexpr std::string_view name = "client";
};
template <> struct Section<LogConfig> : In<LogConfig, &Config::log> {
    static constexpr std::string_view name = "log";
};
template <> struct Section<StatsConfig> : In<StatsConfig, &Config::stats> {
    static constexpr std::string_view name = "stats";
};
template <> struct Section<PolicyConfig> : In<PolicyConfig, &Config::policy> {
    static constexpr std::string_view name = "policy";
};
template <> struct Section<DnsblConfig> : In<DnsblConfig, &Config::dnsbl> {
    static constexpr std::string_view name = "dnsbl";
};
template <> struct Section<AnvilConfig> : In<AnvilConfig, &Config::anvil> {
    static constexpr std::string_view name = "anvil";
};
template <> struct Section<RewriteConfig> : In<RewriteConfig, &Config::rewrite> {
    static constexpr std::string_view name = "rewrite";
};
template <> struct Section<MilterConfig> : In<MilterConfig, &Config::milter> {
    static constexpr std::string_view name = "milter";
};

// A member of a section read through read_value and shown through show_value.
template <class S, class T>
Member field(T S::*f, std::string type,
             std::function<T(const std::string& key, const toml::node&)> read_value,
             std::function<std::string(const T&)> show_value) {
    constexpr S Config::*part = Section<S>::part;
    return {Section<S>::name, std::move(type),
            [=](const std::string& key, const toml::node& n, Config& c) {
                (c.*part).*f = read_value(key, n);
            },
            [=](const Config& c) { return show_value((c.*part).*f); },
            [=](const Config& from, Config& to) { (to.*part).*f = (from.*part).*f; }};
}

// A max of TOML's largest integer or more is no bound.
std::string range(std::uint64_t min, std::uint64_t max) {
    if (max < static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        return std::to_string(min) + ".." + std::to_string(max);
    return ">= " + std::to_string(min);
}

// An integer in min..max.
std::uint64_t integer_of(const std::string& key, const toml::node& n, std::uint64_t min,
                         std::uint64_t max) {
    auto v = n.value<std::int64_t>();
    if (!v) throw ConfigError(key, "wrong type");
    if (*v < 0 || static_cast<std::uint64_t>(*v) < min)
        throw ConfigError(key, min == 1 ? "must be > 0" : "must be >= " + std::to_string(min));
    if (static_cast<std::uint64_t>(*v) > max)
        throw ConfigError(key, "must be <= " + std::to_string(max));
    return static_cast<std::uint64_t>(*v);
}

// A count, size or port.
template <class S, class T>
Member number(T S::*f, std::uint64_t min, std::uint64_t max = std::numeric_limits<T>::max()) {
    return field<S, T>(
        f, "integer " + range(min, max),
        [=](const std::string& key, const toml::node& n) {
            return static_cast<T>(integer_of(key, n, min, max));
        },
        [](const T& v) { return std::to_string(v); });
}

// A duration as a whole number of the member's unit (seconds unless the
// key's name says _ms or _us).
template <class S, class Rep, class Period>
Member duration(std::chrono::duration<Rep, Period> S::*f, std::uint64_t min,
                std::uint64_t max = std::numeric_limits<Rep>::max()) {
    using D = std::chrono::duration<Rep, Period>;
    const char* unit = std::is_same_v<Period, std::micro>   ? "microseconds "
                       : std::is_same_v<Period, std::milli> ? "milliseconds "
                                                            : "seconds ";
    return field<S, D>(
        f, unit + range(min, max),
        [=](const std::string& key, const toml::node& n) {
            return D(static_cast<Rep>(integer_of(key, n, min, max)));
        },
        [](const D& v) { return std::to_string(v.count()); });
}

// A time as postfix writes it: "500ms", "60s", "10m", "1h", "1d", or a bare
// number of seconds (a string or an integer).
std::chrono::milliseconds time_of(const std::string& key, const toml::node& n) {
    const std::string v =
        n.is_integer() ? std::to_string(integer_of(key, n, 0, 999999999)) : config_string(key, n);
    std::size_t digits = 0;
    while (digits < v.size() && std::isdigit(static_cast<unsigned char>(v[digits]))) ++digits;
    const std::string_view unit = std::string_view(v).substr(digits);
    const long long scale = unit == "ms"                  ? 1
                            : unit.empty() || unit == "s" ? 1000
                            : unit == "m"                 ? 60000
                            : unit == "h"                 ? 3600000
                            : unit == "d"                 ? 86400000
                                                          : 0;
    if (digits == 0 || digits > 9 || scale == 0)
        throw ConfigError(key, "'" + v + "' is not a time such as \"500ms\", \"60s\", "
                               "\"10m\", \"1h\" or \"1d\"");
    return std::chrono::milliseconds(std::stoll(v.substr(0, digits)) * scale);
}

// A time in TOML, in seconds when whole.
std::string show_time(std::chrono::milliseconds v) {
    const auto ms = v.count();
    return toml_string(ms % 1000 != 0 ? std::to_string(ms) + "ms" : std::to_string(ms / 1000) + "s");
}

// A time_of in min..max. A member held in seconds takes whole seconds only.
template <class S, class Rep, class Period>
Member span(std::chrono::duration<Rep, Period> S::*f, std::chrono::duration<Rep, Period> min,
            std::chrono::duration<Rep, Period> max) {
    using D = std::chrono::duration<Rep, Period>;
    using std::chrono::milliseconds;
    const auto show = [](const D& v) {
        return show_time(std::chrono::duration_cast<milliseconds>(v));
    };
    return field<S, D>(
        f, "time (ms, s, m, h, d; a bare number is seconds), " + show(min) + " to " + show(max),
        [=](const std::string& key, const toml::node& n) {
            const milliseconds ms = time_of(key, n);
            const D d = std::chrono::duration_cast<D>(ms);
            if (std::chrono::duration_cast<milliseconds>(d) != ms)
                throw ConfigError(key, "'" + show_time(ms) + "' is not a whole number of seconds");
            if (d < min || d > max) throw ConfigError(key, "must be " + show(min) + " to " + show(max));
            return d;
        },
        show);
}

// A whole number in min..max that may be negative.
template <class S>
Member signed_number(int S::*f, int min, int max) {
    return field<S, int>(
        f, "integer " + std::to_string(min) + ".." + std::to_string(max),
        [=](const std::string& key, const toml::node& n) {
            auto v = n.value<std::int64_t>();
            if (!v) throw ConfigError(key, "wrong type");
            if (*v < min || *v > max)
                throw ConfigError(key, "must be " + std::to_string(min) + ".." + std::to_string(max));
            return static_cast<int>(*v);
        },
        [](const int& v) { return std::to_string(v); });
}

template <class S>
Member flag(bool S::*f) {
    return field<S, bool>(
        f, "true or false",
        [](const std::string& key, const toml::node& n) {
            auto v = n.value<bool>();
            if (!v) throw ConfigError(key, "wrong type");
            return *v;
        },
        [](const bool& v) { return std::string(v ? "true" : "false"); });
}

// One of a few names; several may stand for one value (the first one is
// shown, the others are accepted spellings).
template <class S, class T>
Member choice(T S::*f, std::vector<std::pair<std::string, T>> names) {
    std::vector<std::string> shown;
    for (const auto& entry : names) {
        const auto first = std::find_if(names.begin(), names.end(),
                                        [&](const auto& e) { return e.second == entry.second; });
        if (first->first == entry.first) shown.push_back(entry.first);
    }
    std::string list;
    for (std::size_t i = 0; i < shown.size(); ++i)
        list += (i == 0 ? "" : i + 1 == shown.size() ? " or " : ", ") + shown[i];
    return field<S, T>(
        f, list,
        [=](const std::string& key, const toml::node& n) {
            const std::string v = config_string(key, n);
            for (const auto& [name, value] : names)
                if (v == name) return value;
            throw ConfigError(key, "must be " + list);
        },
        [=](const T& v) {
            for (const auto& [name, value] : names)
                if (v == value) return toml_string(name);
            panic("config: a value no name stands for");
        });
}

enum class Empty { allowed, refused };

// A string; check, when given, throws a ConfigError for a bad one.
template <class S>
Member text(std::string S::*f, Empty empty = Empty::allowed,
            std::function<void(const std::string& key, const std::string&)> check = {}) {
    return field<S, std::string>(
        f, "string",
        [=](const std::string& key, const toml::node& n) {
            std::string v = config_string(key, n);
            if (v.empty() && empty == Empty::refused) throw ConfigError(key, "must not be empty");
            if (check && !v.empty()) check(key, v);
            return v;
        },
        [](const std::string& v) { return toml_string(v); });
}

// A string or a list of them, each made a T by parse.
template <class S, class T>
Member list(std::vector<T> S::*f,
            std::function<T(const std::string& key, const std::string&)> parse,
            std::function<std::string(const T&)> show_item, Empty empty = Empty::allowed) {
    return field<S, std::vector<T>>(
        f, "list of strings",
        [=](const std::string& key, const toml::node& n) {
            std::vector<T> out;
            for (const auto& s : config_strings(key, n)) out.push_back(parse(key, s));
            if (out.empty() && empty == Empty::refused)
                throw ConfigError(key, "must not be empty");
            return out;
        },
        [=](const std::vector<T>& v) {
            std::string out = "[";
            for (std::size_t i = 0; i < v.size(); ++i)
                out += (i ? ", " : "") + toml_string(show_item(v[i]));
            return out + "]";
        });
}

std::string as_is(const std::string& s) { return s; }

constexpr std::pair<std::string_view, PolicyStage> policy_stage_names[] = {
    {"connect", PolicyStage::connect}, {"helo", PolicyStage::helo},
    {"mail", PolicyStage::mail},       {"rcpt", PolicyStage::rcpt},
    {"data", PolicyStage::data},       {"end_of_data", PolicyStage::end_of_data}};

// What policy_service_default_action may say: the access(5) actions that
// decide without a service (DUNNO and OK let the stage go on).
bool valid_policy_action(std::string_view v) {
    const std::string_view word = v.substr(0, v.find_first_of(" \t"));
    for (std::string_view a : {"DUNNO", "OK", "DEFER", "REJECT", "DEFER_IF_PERMIT"})
        if (iequals(word, a)) return true;
    return word.size() == 3 && (word[0] == '4' || word[0] == '5') &&
           std::all_of(word.begin(), word.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
           word.size() < v.size();
}

// Lookup tables, "type:name" each (hash:/etc/smx/access, texthash:...,
// inline:{k=v}), searched in order: their syntax checked at load, the
// tables opened by check-config and smx run (config_tables).
template <class S>
Member tables(std::vector<std::string> S::*f) {
    Member m = list<S, std::string>(
        f,
        [](const std::string& key, const std::string& spec) {
            try {
                table::check_spec(spec);
            } catch (const table::TableError& e) {
                throw ConfigError(key, e.what());
            }
            return spec;
        },
        as_is);
    m.type = "list of tables (\"type:name\")";
    constexpr S Config::*part = Section<S>::part;
    m.tables = [f](const Config& c) { return (c.*part).*f; };
    return m;
}

const std::vector<std::pair<std::string, MilterAction>> milter_actions = {
    {"tempfail", MilterAction::tempfail},
    {"accept", MilterAction::accept},
    {"reject", MilterAction::reject},
    {"quarantine", MilterAction::quarantine},
};

// A milter's own timeout: 1 ms to 1 day.
std::chrono::milliseconds milter_time(const std::string& key, const toml::node& n) {
    const auto t = time_of(key, n);
    if (t.count() < 1 || t > std::chrono::hours(24)) throw ConfigError(key, "must be 1ms to 1d");
    return t;
}

// "inet:host:port", "unix:/path", or an inline table with the socket and
// what this milter sets itself.
MilterEntry milter_entry(const std::string& key, const toml::node& n) {
    MilterEntry e;
    const toml::table* t = n.as_table();
    if (!t) {
        e.socket = config_string(key, n);
    } else {
        for (const auto& [k, v] : *t) {
            const std::string name = key + "." + std::string(k.str());
            if (k == "socket") {
                e.socket = config_string(name, v);
            } else if (k == "default_action") {
                const std::string a = config_string(name, v);
                const auto it = std::find_if(milter_actions.begin(), milter_actions.end(),
                                             [&](const auto& p) { return p.first == a; });
                if (it == milter_actions.end())
                    throw ConfigError(name, "must be tempfail, accept, reject or quarantine");
                e.default_action = it->second;
            } else if (k == "connect_timeout") {
                e.connect_timeout = milter_time(name, v);
            } else if (k == "command_timeout") {
                e.command_timeout = milter_time(name, v);
            } else if (k == "content_timeout") {
                e.content_timeout = milter_time(name, v);
            } else {
                throw ConfigError(name, "unknown key (socket, default_action, connect_timeout, "
                                        "command_timeout, content_timeout)");
            }
        }
        if (e.socket.empty()) throw ConfigError(key, "a milter's table needs socket = \"...\"");
    }
    std::string err;
    if (!milter::parse_socket(e.socket, err)) throw ConfigError(key, err);
    return e;
}

std::vector<MilterEntry> milter_entries(const std::string& key, const toml::node& n) {
    std::vector<MilterEntry> out;
    if (const toml::array* a = n.as_array()) {
        for (const auto& e : *a) out.push_back(milter_entry(key, e));
    } else {
        out.push_back(milter_entry(key, n));
    }
    return out;
}

std::string show_milters(const std::vector<MilterEntry>& list) {
    std::string out = "[";
    for (std::size_t i = 0; i < list.size(); ++i) {
        const auto& e = list[i];
        out += i ? ", " : "";
        if (!e.default_action && !e.connect_timeout && !e.command_timeout && !e.content_timeout) {
            out += toml_string(e.socket);
            continue;
        }
        out += "{ socket = " + toml_string(e.socket);
        if (e.default_action)
            for (const auto& [name, value] : milter_actions)
                if (value == *e.default_action) out += ", default_action = " + toml_string(name);
        if (e.connect_timeout) out += ", connect_timeout = " + show_time(*e.connect_timeout);
        if (e.command_timeout) out += ", command_timeout = " + show_time(*e.command_timeout);
        if (e.content_timeout) out += ", content_timeout = " + show_time(*e.content_timeout);
        out += " }";
    }
    return out + "]";
}

// A list of milters.
Member milters(std::vector<MilterEntry> MilterConfig::*f) {
    return field<MilterConfig, std::vector<MilterEntry>>(
        f, "list of milters (\"inet:host:port\", \"unix:/path\" or an inline table)",
        milter_entries, show_milters);
}

// Listener address -> its list of milters.
Member listener_milters() {
    using Map = std::map<std::string, std::vector<MilterEntry>>;
    return field<MilterConfig, Map>(
        &MilterConfig::listener_milters, "table of listener address = list of milters",
        [](const std::string& key, const toml::node& n) {
            const toml::table* t = n.as_table();
            if (!t) throw ConfigError(key, "expected a table { \"host:port\" = [...] }");
            Map out;
            for (const auto& [k, v] : *t) {
                const std::string name = key + "." + std::string(k.str());
                const auto where = parse_hostport(name, std::string(k.str()), 25).address();
                out[where] = milter_entries(name, v);
            }
            return out;
        },
        [](const Map& m) {
            std::string out = "{";
            for (const auto& [where, list] : m)
                out += (out.size() > 1 ? ", " : " ") + toml_string(where) + " = " +
                       show_milters(list);
            return out + (m.empty() ? "}" : " }");
        });
}

// 2, 3, 4 or 6: the versions of the milter protocol (there is no 5).
Member milter_protocol() {
    return field<MilterConfig, unsigned>(
        &MilterConfig::protocol, "integer 2, 3, 4 or 6",
        [](const std::string& key, const toml::node& n) {
            const auto v = integer_of(key, n, 2, 6);
            if (v == 5) throw ConfigError(key, "must be 2, 3, 4 or 6");
            return static_cast<unsigned>(v);
        },
        [](const unsigned& v) { return std::to_string(v); });
}

std::string system_hostname() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "localhost";
    return buf;
}

using S = ServerConfig;
using Q = QueueConfig;
using C = ClientConfig;
using L = LogConfig;
using P = PolicyConfig;
using D = DnsblConfig;
using A = AnvilConfig;
using W = RewriteConfig;
using M = MilterConfig;
constexpr auto reload = Reload::reload;
constexpr auto restart = Reload::restart;

std::vector<ConfigKey> make_keys() {
    return {
        // [server]: SMTPS and the accounts smx run gives its children.
        ConfigKey("server.listen",
                  list<S, HostPort>(
                      &S::listen,
                      [](const std::string& key, const std::string& s) {
                          return parse_hostport(key, s, 25);
                      },
                      // A listening address: its port matters, not its brackets.
                      [](const HostPort& hp) { return hp.address(); }, Empty::refused),
                  restart, "addresses to accept SMTP on, \"host:port\" or \"[v6addr]:port\"")
            .decided(),
        ConfigKey("server.hostname", text<S>(&S::hostname, Empty::refused), restart,
                  "the name in the greeting, the EHLO reply and the Received: header")
            .computed("the system host name",
                      [](Config& c) { c.server.hostname = system_hostname(); })
            .shown_as("\"mail.example.com\"")
            .decided(),
        ConfigKey("server.relay_networks",
                  list<S, Cidr>(&S::relay_networks, parse_cidr,
                                [](const Cidr& c) { return c.str(); }),
                  reload, "clients (CIDR) that may relay to any domain")
            .decided(),
        ConfigKey("server.relay_domains",
                  list<S, std::string>(
                      &S::relay_domains,
                      [](const std::string&, const std::string& d) { return lower(d); }, as_is),
                  reload,
                  "recipient domains accepted from any client (\".example.com\": its subdomains); "
                  "everything else gets 554 5.7.1")
            .decided(),
        ConfigKey("server.tls_cert", text<S>(&S::tls_cert), reload,
                  "PEM certificate chain (server certificate first) for STARTTLS; \"\": none")
            .shown_as("\"/etc/smx/tls/fullchain.pem\"")
            .decided(),
        ConfigKey("server.tls_key", text<S>(&S::tls_key), reload,
                  "the PEM private key of tls_cert; \"\": none")
            .shown_as("\"/etc/smx/tls/privkey.pem\"")
            .decided(),
        ConfigKey("server.tls_security_level",
                  choice<S, TlsLevel>(&S::tls_security_level, {{"none", TlsLevel::none},
                                                               {"may", TlsLevel::may},
                                                               {"encrypt", TlsLevel::encrypt}}),
                  reload, "STARTTLS not offered, offered, or required before MAIL (530 5.7.0)")
            .computed("\"may\" with a certificate, else \"none\"",
                      [](Config& c) {
                          c.server.tls_security_level =
                              c.server.tls_cert.empty() ? TlsLevel::none : TlsLevel::may;
                      })
            .shown_as("\"may\""),
        ConfigKey("server.smtps_user", text<S>(&S::smtps_user, Empty::refused), restart,
                  "started as root: the account smx-smtps runs as"),
        ConfigKey("server.qmgr_user", text<S>(&S::qmgr_user, Empty::refused), restart,
                  "started as root: the account smx-qmgr runs as"),
        ConfigKey("server.smtpc_user", text<S>(&S::smtpc_user, Empty::refused), restart,
                  "started as root: the account smx-smtpc runs as"),
        ConfigKey("server.group", text<S>(&S::group, Empty::refused), restart,
                  "the group the three children share (content files, qmgr.sock, the log file)"),
        ConfigKey("server.maildrop_group", text<S>(&S::maildrop_group, Empty::refused), restart,
                  "the group smx-postdrop is setgid to, which alone may write the maildrop"),
        ConfigKey("server.user", text<S>(&S::user), restart,
                  "set: all three children run as this one account instead"),
        ConfigKey("server.admin_group", text<S>(&S::admin_group), restart,
                  "its members may run every smx command against QMGR"),
        ConfigKey("server.stats_group", text<S>(&S::stats_group), restart,
                  "its members may run smx stats, queue and qshape"),
        ConfigKey("server.max_message_size", number<S>(&S::max_message_size, 1), reload,
                  "bytes; a larger message gets 552 5.3.4"),
        ConfigKey("server.max_recipients", number<S>(&S::max_recipients, 1, 100000), reload,
                  "recipients in one transaction; more get 452 4.5.3"),
        ConfigKey("server.max_connections", number<S>(&S::max_connections, 1, 1000000), reload,
                  "concurrent SMTP sessions; then 421 4.7.0"),
        ConfigKey("server.max_connections_per_client",
                  number<S>(&S::max_connections_per_client, 0, 1000000), reload,
                  "concurrent sessions from one address (all processes); 0: no limit"),
        ConfigKey("server.max_transactions", number<S>(&S::max_transactions, 0, 1000000), reload,
                  "mail transactions at once; a MAIL past it waits; 0: no limit"),
        ConfigKey("server.transaction_wait_ms", duration<S>(&S::transaction_wait, 0, 60000), reload,
                  "the longest a MAIL waits under max_transactions, then it goes ahead"),
        ConfigKey("server.command_timeout", duration<S>(&S::command_timeout, 1), reload,
                  "for each whole command line; then 421 4.4.2"),
        ConfigKey("server.data_timeout", duration<S>(&S::data_timeout, 1), reload,
                  "for each line of message data; then 421 4.4.2"),
        ConfigKey("server.min_data_rate", number<S>(&S::min_data_rate, 0, 1u << 30), reload,
                  "bytes a second DATA must average; 0: only data_timeout"),
        ConfigKey("server.allow_untrusted_routing", flag<S>(&S::allow_untrusted_routing), reload,
                  "false: \"u@evil\"@d, u%evil@d, evil!u@d from outside relay_networks get "
                  "554 5.7.1"),
        ConfigKey("server.max_errors", number<S>(&S::max_errors, 1, 1000), reload,
                  "protocol errors in a session before 421 and close"),
        ConfigKey("server.max_junk_commands", number<S>(&S::max_junk_commands, 0, 1000000), reload,
                  "NOOP, VRFY, RSET and HELP in a session before each further one counts as "
                  "an error"),
        ConfigKey("server.max_hops", number<S>(&S::max_hops, 1, 1000), reload,
                  "Received: headers before 554 5.4.6 (a mail loop)"),
        ConfigKey("server.max_line_length", number<S>(&S::max_line_length, 512, 65536), reload,
                  "the longest command line in bytes (RFC 5321: at least 512)"),
        ConfigKey("server.bare_lf",
                  choice<S, bool>(&S::reject_bare_lf,
                                  {{"reject", true}, {"normalize", false}, {"normalise", false}}),
                  reload, "a bare LF or CR in message data gets 550 5.6.11, or is made CRLF"),
        ConfigKey("server.threads", number<S>(&S::threads, 0, 64), restart,
                  "event loops in smx-smtps; 0: one per two CPUs"),
        ConfigKey("server.processes", number<S>(&S::processes, 0, max_smtps_processes), restart,
                  "smx-smtps processes; 0: as many as max_connections needs"),

        // [queue]: the stores and QMGR, whose parts take them at start.
        ConfigKey("queue.spool_dir", text<Q>(&Q::spool_dir, Empty::refused), restart,
                  "holds cdb/, ibdb/, defedb/ and quarantine/"),
        ConfigKey("queue.content_dir", text<Q>(&Q::content_dir), restart,
                  "the message files; \"\": <spool_dir>/cdb"),
        ConfigKey("queue.ibdb_dir", text<Q>(&Q::ibdb_dir), restart,
                  "the envelope log (IBDB); \"\": <spool_dir>/ibdb"),
        ConfigKey("queue.run_dir", text<Q>(&Q::run_dir, Empty::refused), restart,
                  "holds qmgr.sock and smx.pid"),
        ConfigKey("queue.commit_policy",
                  choice<Q, bool>(&Q::commit_adaptive, {{"adaptive", true}, {"fixed", false}}),
                  restart,
                  "adaptive: a batch ends when arrivals pause; fixed: after commit_interval_us"),
        ConfigKey("queue.commit_interval_us", duration<Q>(&Q::commit_interval, 0, 10000000),
                  restart,
                  "the longest a transaction waits for the group commit that makes it durable"),
        ConfigKey("queue.commit_max_batch", number<Q>(&Q::commit_max_batch, 1, 100000), restart,
                  "commit at once when this many transactions wait"),
        ConfigKey("queue.ibdb_file_size", number<Q>(&Q::ibdb_file_size, 1), restart,
                  "bytes; IBDB log files rotate at this size"),
        ConfigKey("queue.cdb_hashed", flag<Q>(&Q::cdb_hashed), restart,
                  "message files in 256 subdirectories cdb/XX/; false: one flat cdb/"),
        ConfigKey("queue.content_segments", flag<Q>(&Q::content_segments), restart,
                  "messages under 256 KiB share content segments; false: a file each"),
        ConfigKey("queue.content_sync",
                  choice<Q, Q::ContentSync>(&Q::content_sync, {{"batch", Q::ContentSync::batch},
                                                               {"file", Q::ContentSync::file}}),
                  restart, "batch: one syncfs per group commit; file: an fdatasync per message"),
        ConfigKey("queue.test_segment_age", duration<Q>(&Q::segment_age, 3, 3600), restart,
                  "test builds only: content segments go this long after use")
            .only_in_test_builds(),
        ConfigKey("queue.test_no_sync", flag<Q>(&Q::test_no_sync), restart,
                  "test builds only: skip every sync, for the \"fsync off\" experiment")
            .only_in_test_builds(),
        ConfigKey("queue.aq_max_entries", number<Q>(&Q::aq_max_entries, 1, 100000000), restart,
                  "recipients in the active queue; then new mail gets 452 4.3.1"),
        ConfigKey("queue.retry_min", duration<Q>(&Q::retry_min, 1), restart,
                  "the first retry delay, doubling ..."),
        ConfigKey("queue.retry_max", duration<Q>(&Q::retry_max, 1), restart, "... up to this"),
        ConfigKey("queue.max_queue_lifetime", duration<Q>(&Q::max_queue_lifetime, 1), restart,
                  "from arrival: then a message that fails temporarily is bounced"),
        ConfigKey("queue.orphan_age", duration<Q>(&Q::orphan_age, 10), restart,
                  "a content file no transaction names, this old, goes to quarantine/"),
        ConfigKey("queue.delay_warning_time", duration<Q>(&Q::delay_warning_time, 0), restart,
                  "queued this long, the sender gets one delay DSN; 0: never"),
        ConfigKey("queue.max_delivery_time", duration<Q>(&Q::max_delivery_time, 1), restart,
                  "a delivery SMTPC has not answered this long is taken back"),
        ConfigKey("queue.soft_bounce", flag<Q>(&Q::soft_bounce), restart,
                  "true: a 5xx from a next hop is retried, never bounced"),
        ConfigKey("queue.bounce_untrusted", flag<Q>(&Q::bounce_untrusted), restart,
                  "false: no DSN for mail from clients outside relay_networks"),
        ConfigKey("queue.min_free_space", number<Q>(&Q::min_free_space, 0), restart,
                  "bytes new mail must leave free on each store's file system; else 452 4.3.1"),
        // Routing tables: QMGR opens them at start and reload.
        ConfigKey("queue.transport_maps", tables<Q>(&Q::transport_maps), reload,
                  "transport(5) tables by recipient address and domain, before [routes]"),
        ConfigKey("queue.sender_dependent_relayhost_maps",
                  tables<Q>(&Q::sender_dependent_relayhost_maps), reload,
                  "next hops by sender address or @domain, instead of the default route"),

        // [client]: SMTPC and QMGR's scheduler.
        ConfigKey("client.connect_timeout", duration<C>(&C::connect_timeout, 1), reload,
                  "to connect to a next hop"),
        ConfigKey("client.command_timeout", duration<C>(&C::command_timeout, 1), reload,
                  "for each reply of a next hop, and each write to it"),
        ConfigKey("client.delivery_timeout", duration<C>(&C::delivery_timeout, 1), reload,
                  "one delivery attempt as a whole: DNS, connects, the transaction"),
        ConfigKey("client.idle_timeout", duration<C>(&C::idle_timeout, 1), reload,
                  "a cached connection unused this long is closed"),
        ConfigKey("client.max_msgs_per_connection",
                  number<C>(&C::max_msgs_per_connection, 1, 1000000), reload,
                  "messages over one connection before it is closed"),
        ConfigKey("client.initial_concurrency", number<C>(&C::initial_concurrency, 1, 10000),
                  restart, "connections to a new destination at first ..."),
        ConfigKey("client.max_concurrency", number<C>(&C::max_concurrency, 1, 10000), restart,
                  "... growing to this while deliveries succeed"),
        ConfigKey("client.rate_limit", number<C>(&C::rate_limit, 0, 1000000), reload,
                  "deliveries per destination per rate_interval, evenly spaced; 0: no limit"),
        ConfigKey("client.rate_interval", duration<C>(&C::rate_interval, 1), reload,
                  "what rate_limit counts over"),
        ConfigKey("client.helo_name", text<C>(&C::helo_name), reload,
                  "the name sent in EHLO or HELO")
            .computed("server.hostname", [](Config& c) { c.client.helo_name = c.server.hostname; })
            .shown_as("\"mail.example.com\""),
        ConfigKey("client.tls_security_level",
                  choice<C, ClientTls>(&C::tls_security_level, {{"none", ClientTls::none},
                                                                {"may", ClientTls::may},
                                                                {"encrypt", ClientTls::encrypt},
                                                                {"verify", ClientTls::verify}}),
                  reload,
                  "STARTTLS to next hops without a [tls_policy] entry"),
        ConfigKey("client.tls_ca_file", text<C>(&C::tls_ca_file), reload,
                  "PEM CA certificates for verify; \"\": the system's"),
        ConfigKey("client.sasl_password_file", text<C>(&C::sasl_password_file), reload,
                  "smart-host credentials, lines \"[relay.example]:587 user:password\", mode 0600"),
        ConfigKey("client.dns_servers",
                  list<C, std::string>(
                      &C::dns_servers,
                      [](const std::string& key, const std::string& d) {
                          if (!ip_address(parse_hostport(key, d, 53).host))
                              throw ConfigError(key, "'" + d + "' is not an IP address[:port]");
                          return d;
                      },
                      as_is),
                  restart,
                  "name servers for MX lookups, \"ip\" or \"ip:port\"; []: /etc/resolv.conf"),
        ConfigKey("client.smtp_port", number<C>(&C::smtp_port, 1, 65535), restart,
                  "the port of hosts found by MX lookup"),

        // [policy]: SMTPS's access tables (docs/policy.md), opened again at each
        // reload, and the client name (issue 28 item 7); [dnsbl]: SMTPS at connect.
        ConfigKey("policy.client_access", tables<P>(&P::client_access), reload,
                  "access(5) tables for the client name, address and networks"),
        ConfigKey("policy.helo_access", tables<P>(&P::helo_access), reload,
                  "access(5) tables for the HELO/EHLO name and its parent domains"),
        ConfigKey("policy.sender_access", tables<P>(&P::sender_access), reload,
                  "access(5) tables for the MAIL FROM address (\"<>\": the null sender)"),
        ConfigKey("policy.recipient_access", tables<P>(&P::recipient_access), reload,
                  "access(5) tables for the RCPT TO address"),
        ConfigKey("policy.relay_recipient_maps", tables<P>(&P::relay_recipient_maps), reload,
                  "the known recipients of relay_domains (user@domain, @domain); others get "
                  "550 5.1.1; []: all"),
        ConfigKey("policy.delay_reject", flag<P>(&P::delay_reject), reload,
                  "refusals of the client (its name) answered at RCPT, not at connect"),
        ConfigKey("policy.client_name_lookup", flag<P>(&P::client_name_lookup), reload,
                  "look the client's name up (PTR, confirmed by its address); false: unknown"),
        ConfigKey("policy.client_name_timeout",
                  span<P>(&P::client_name_timeout, std::chrono::milliseconds(100),
                          std::chrono::milliseconds(60000)),
                  reload, "the longest the name lookup may take; then the client is unknown"),
        ConfigKey("policy.reject_unknown_client_hostname",
                  flag<P>(&P::reject_unknown_client_hostname), reload,
                  "clients without a confirmed name get 450 4.7.25, or 550 5.7.25 when no name "
                  "exists"),
        ConfigKey("policy.header_checks", tables<P>(&P::header_checks), reload,
                  "tables (pcre:, regexp:) whose results act on each header field: REJECT, "
                  "DISCARD, HOLD, WARN, IGNORE, PREPEND, REPLACE ..."),
        ConfigKey("policy.body_checks", tables<P>(&P::body_checks), reload,
                  "the same for each body line"),
        ConfigKey("policy.header_size_limit", number<P>(&P::header_size_limit, 1024, 64u << 20), reload,
                  "bytes of the header section that header_checks read; the rest is kept, "
                  "unchecked"),
        ConfigKey("policy.body_checks_size_limit",
                  number<P>(&P::body_checks_size_limit, 0, std::uint64_t{1} << 40), reload,
                  "bytes of the body that body_checks read; the rest is kept, unchecked"),
        ConfigKey("policy.policy_services",
                  list<P, ServiceSocket>(&P::policy_services, parse_service_socket,
                                         [](const ServiceSocket& s) { return s.text; }),
                  reload,
                  "policy delegation servers (postfix's check_policy_service), \"inet:host:port\" "
                  "or \"unix:/path\", asked in this order")
            .shown_as("[\"inet:127.0.0.1:10023\"]"),
        ConfigKey("policy.policy_service_stages",
                  list<P, PolicyStage>(
                      &P::policy_service_stages,
                      [](const std::string& key, const std::string& s) {
                          for (const auto& [name, stage] : policy_stage_names)
                              if (s == name) return stage;
                          throw ConfigError(key, "'" + s + "' is not a stage (connect, helo, mail, "
                                                 "rcpt, data or end_of_data)");
                      },
                      [](const PolicyStage& st) {
                          for (const auto& [name, stage] : policy_stage_names)
                              if (st == stage) return std::string(name);
                          panic("config: a policy stage without a name");
                      }),
                  reload, "where the services are asked: connect, helo, mail, rcpt, data, end_of_data"),
        ConfigKey("policy.policy_service_timeout",
                  span<P>(&P::policy_service_timeout, std::chrono::milliseconds(100),
                          std::chrono::milliseconds(3600000)),
                  reload, "the deadline of connecting, sending a request and reading its answer"),
        ConfigKey("policy.policy_service_max_idle",
                  span<P>(&P::policy_service_max_idle, std::chrono::milliseconds(100),
                          std::chrono::milliseconds(86400000)),
                  reload, "an unused connection to a service closes after this"),
        ConfigKey("policy.policy_service_max_ttl",
                  span<P>(&P::policy_service_max_ttl, std::chrono::milliseconds(100),
                          std::chrono::milliseconds(86400000)),
                  reload, "a connection to a service is not reused once this old"),
        ConfigKey("policy.policy_service_request_limit",
                  number<P>(&P::policy_service_request_limit, 0, 1000000), reload,
                  "requests per connection, then a new one; 0: no limit"),
        ConfigKey("policy.policy_service_try_limit", number<P>(&P::policy_service_try_limit, 1, 10),
                  reload, "attempts at a request before the default action"),
        ConfigKey("policy.policy_service_retry_delay",
                  span<P>(&P::policy_service_retry_delay, std::chrono::milliseconds(0),
                          std::chrono::milliseconds(60000)),
                  reload, "the wait between two attempts"),
        ConfigKey("policy.policy_service_default_action",
                  text<P>(&P::policy_service_default_action, Empty::refused,
                          [](const std::string& key, const std::string& v) {
                              if (!valid_policy_action(v))
                                  throw ConfigError(key, "'" + v + "' is not an access(5) action "
                                                         "(DUNNO, OK, DEFER, REJECT or 4NN/5NN text)");
                          }),
                  reload, "what a stage does when no service answered"),
        ConfigKey("dnsbl.sites",
                  list<D, DnsblSite>(&D::sites, parse_dnsbl_site,
                                     [](const DnsblSite& d) { return d.text; }),
                  reload,
                  "lists asked at connect, \"zone[=filter][*weight]\" (postscreen_dnsbl_sites); "
                  "a negative weight allows")
            .shown_as("[\"zen.spamhaus.org*2\", \"list.dnswl.org=127.0.[0..255].[1..3]*-5\"]"),
        ConfigKey("dnsbl.threshold", signed_number<D>(&D::threshold, 1, 1000000), reload,
                  "a client whose weights add up to this is blocked"),
        ConfigKey("dnsbl.whitelist_threshold",
                  signed_number<D>(&D::whitelist_threshold, -1000000, 0), reload,
                  "a client whose weights add up to this or less skips the pregreet check "
                  "(0: every unlisted client)"),
        ConfigKey("dnsbl.timeout",
                  span<D>(&D::timeout, std::chrono::milliseconds(100),
                          std::chrono::milliseconds(60000)),
                  reload, "the longest a list's answer is waited for; then not listed"),
        ConfigKey("dnsbl.action", choice<D, bool>(&D::reject, {{"reject", true}, {"ignore", false}}),
                  reload, "reject: a blocked client gets 550 5.7.1 to all but QUIT; ignore: logged"),
        ConfigKey("dnsbl.pregreet_wait",
                  span<D>(&D::pregreet_wait, std::chrono::milliseconds(0),
                          std::chrono::milliseconds(60000)),
                  reload,
                  "the greeting waits this long and a client that talks first is refused; "
                  "\"0s\": no wait"),

        // [log] and [stats]: opened at start, but for the level.
        ConfigKey("log.level",
                  choice<L, std::string>(&L::level, {{"trace", "trace"},
                                                     {"debug", "debug"},
                                                     {"info", "info"},
                                                     {"warn", "warn"},
                                                     {"error", "error"},
                                                     {"critical", "critical"},
                                                     {"off", "off"}}),
                  reload, "the least severe lines logged"),
        ConfigKey("log.file", text<L>(&L::file), restart,
                  "append log lines here; \"\": standard error"),
        ConfigKey("log.syslog", text<L>(&L::syslog), restart,
                  "a syslog socket (\"/dev/log\") to log to instead of file"),
        // RFC 5424's codes of the facilities a mail system would log to.
        ConfigKey("log.syslog_facility",
                  choice<L, int>(&L::syslog_facility,
                                 {{"mail", 2}, {"daemon", 3}, {"local0", 16}, {"local1", 17},
                                  {"local2", 18}, {"local3", 19}, {"local4", 20}, {"local5", 21},
                                  {"local6", 22}, {"local7", 23}}),
                  restart, "the facility of the syslog lines"),
        // What syslog takes as a program name ends at a space, '[' or ':'.
        ConfigKey("log.syslog_name",
                  text<L>(&L::syslog_name, Empty::refused,
                          [](const std::string& key, const std::string& v) {
                              if (v.size() > 64 ||
                                  !std::all_of(v.begin(), v.end(), [](char ch) {
                                      return std::isalnum(static_cast<unsigned char>(ch)) ||
                                             ch == '-' || ch == '_' || ch == '.' || ch == '/';
                                  }))
                                  throw ConfigError(
                                      key, "must be 1 to 64 letters, digits, '-', '_', '.' or '/'");
                          }),
                  restart, "what each line's program name begins with (postfix's syslog_name)"),
        ConfigKey("stats.listen",
                  text<StatsConfig>(&StatsConfig::listen, Empty::allowed,
                                    [](const std::string& key, const std::string& v) {
                                        parse_hostport(key, v, 9525);
                                    }),
                  restart, "\"host:port\": Prometheus text at http://host:port/metrics; \"\": off"),

        // [anvil]: per-client limits, counted by QMGR for every smx-smtps.
        ConfigKey("anvil.rate_time_unit",
                  span<A>(&A::rate_time_unit, std::chrono::seconds(1), std::chrono::seconds(7 * 86400)),
                  reload,
                  "the time the rate limits count over"),
        ConfigKey("anvil.connection_rate_limit", number<A>(&A::connection_rate_limit, 0, 1u << 30),
                  reload, "connections from one client per rate_time_unit; then 421; 0: no limit"),
        ConfigKey("anvil.message_rate_limit", number<A>(&A::message_rate_limit, 0, 1u << 30),
                  reload, "MAIL commands from one client per rate_time_unit; then 450; 0: no limit"),
        ConfigKey("anvil.recipient_rate_limit", number<A>(&A::recipient_rate_limit, 0, 1u << 30),
                  reload, "RCPT commands from one client per rate_time_unit; then 450; 0: no limit"),
        ConfigKey("anvil.ipv6_prefix", number<A>(&A::ipv6_prefix, 1, 128), reload,
                  "IPv6 clients are counted by their network of this many bits"),
        ConfigKey("anvil.exceptions",
                  list<A, Cidr>(&A::exceptions, parse_cidr, [](const Cidr& c) { return c.str(); }),
                  reload, "clients (CIDR) never counted or limited"),
        ConfigKey("anvil.exempt_relay_networks", flag<A>(&A::exempt_relay_networks), reload,
                  "true: clients in server.relay_networks are never counted or limited"),
        ConfigKey("anvil.max_clients", number<A>(&A::max_clients, 1000, 10000000), reload,
                  "clients QMGR tracks at most; the least recently seen idle one goes first"),
        // [rewrite]: SMTPS and smx-pickup, before the envelope is committed.
        ConfigKey("rewrite.recipient_delimiter", text<W>(&W::recipient_delimiter), reload,
                  "characters that start an address extension (\"+\"); \"\": none"),
        ConfigKey("rewrite.canonical_maps", tables<W>(&W::canonical_maps), reload,
                  "canonical(5) tables for sender and recipient addresses"),
        ConfigKey("rewrite.sender_canonical_maps", tables<W>(&W::sender_canonical_maps), reload,
                  "canonical(5) tables for the sender, before canonical_maps"),
        ConfigKey("rewrite.recipient_canonical_maps", tables<W>(&W::recipient_canonical_maps),
                  reload, "canonical(5) tables for recipients, before canonical_maps"),
        ConfigKey("rewrite.virtual_alias_maps", tables<W>(&W::virtual_alias_maps), reload,
                  "virtual(5) tables: a recipient to one or more addresses, recursively"),
        ConfigKey("rewrite.virtual_alias_recursion_limit",
                  number<W>(&W::virtual_alias_recursion_limit, 1, 1000), reload,
                  "nesting of alias expansion; deeper gets 451 4.6.0"),
        ConfigKey("rewrite.virtual_alias_expansion_limit",
                  number<W>(&W::virtual_alias_expansion_limit, 1, 100000), reload,
                  "addresses one recipient may expand to; more gets 451 4.6.0"),
        ConfigKey("rewrite.alias_maps", tables<W>(&W::alias_maps), reload,
                  "aliases(5) tables (built by newaliases) for recipients in local_domains"),
        ConfigKey("rewrite.local_domains",
                  list<W, std::string>(
                      &W::local_domains,
                      [](const std::string&, const std::string& d) { return lower(d); }, as_is),
                  reload, "domains whose local parts alias_maps names")
            .computed("[server.hostname]",
                      [](Config& c) { c.rewrite.local_domains = {lower(c.server.hostname)}; })
            .shown_as("[\"mail.example.com\"]"),
        // [milter]: sendmail milters (docs/milter.md).
        ConfigKey("milter.smtpd_milters", milters(&M::smtpd_milters), reload,
                  "milters every SMTP session consults, in order (postfix's smtpd_milters)")
            .shown_as("[\"inet:127.0.0.1:8891\"]"),
        ConfigKey("milter.non_smtpd_milters", milters(&M::non_smtpd_milters), reload,
                  "milters mail from the sendmail command passes (postfix's non_smtpd_milters)"),
        ConfigKey("milter.listener_milters", listener_milters(), reload,
                  "a listener's own milters instead of smtpd_milters, keyed by its address"),
        ConfigKey("milter.connect_timeout", span<M>(&M::connect_timeout, std::chrono::milliseconds(1),
                                                    std::chrono::milliseconds(86400000)),
                  reload, "time to connect to a milter and negotiate"),
        ConfigKey("milter.command_timeout", span<M>(&M::command_timeout, std::chrono::milliseconds(1),
                                                    std::chrono::milliseconds(86400000)),
                  reload, "time for a milter's reply to a command (connect, HELO, MAIL, RCPT, DATA)"),
        ConfigKey("milter.content_timeout", span<M>(&M::content_timeout, std::chrono::milliseconds(1),
                                                    std::chrono::milliseconds(86400000)),
                  reload, "time for a milter's reply to content (headers, body, end of message)"),
        ConfigKey("milter.default_action",
                  choice<M, MilterAction>(&M::default_action, milter_actions), reload,
                  "what a failed or timed-out milter's verdict is"),
        ConfigKey("milter.protocol", milter_protocol(), reload,
                  "the milter protocol version offered"),
    };
}

} // namespace

ConfigKey::ConfigKey(std::string name_, Member member_, Reload reload_, std::string description_)
    : name(std::move(name_)), member(std::move(member_)), reload(reload_),
      description(std::move(description_)) {
    // The row names its member's section: a mismatch is a bug in the table.
    const std::string_view n(name);
    if (n.size() <= member.section.size() + 1 || !n.starts_with(member.section) ||
        n[member.section.size()] != '.' || key().find('.') != std::string_view::npos)
        panic("config key " + name + " is not in its member's section " +
              std::string(member.section));
}

ConfigKey&& ConfigKey::computed(std::string words, std::function<void(Config&)> fill_default) && {
    computed_default = std::move(words);
    fill = std::move(fill_default);
    return std::move(*this);
}

ConfigKey&& ConfigKey::shown_as(std::string example_value) && {
    example = std::move(example_value);
    return std::move(*this);
}

ConfigKey&& ConfigKey::only_in_test_builds() && {
    test_build = true;
    return std::move(*this);
}

ConfigKey&& ConfigKey::decided() && {
    decide = true;
    return std::move(*this);
}

const std::vector<ConfigKey>& config_keys() {
    static const std::vector<ConfigKey> keys = make_keys();
    return keys;
}

const ConfigKey* find_config_key(std::string_view name) {
    for (const auto& k : config_keys())
        if (k.name == name) return &k;
    return nullptr;
}

bool accepted(const ConfigKey& k) { return !k.test_build || SMX_TEST_HOOKS; }

std::vector<std::pair<std::string, std::string>> config_tables(const Config& cfg) {
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& k : config_keys())
        if (k.member.tables)
            for (auto& spec : k.member.tables(cfg)) out.emplace_back(k.name, std::move(spec));
    return out;
}

namespace {
// TOML can spell a NUL (\u0000); no setting holds one, and the C calls a
// value goes to (inet_pton, open) would silently stop at it.
const std::string& no_nul(const std::string& key, const std::string& v) {
    if (v.find('\0') != std::string::npos) throw ConfigError(key, "contains a NUL character");
    return v;
}
} // namespace

std::string config_string(const std::string& key, const toml::node& n) {
    auto v = n.value<std::string>();
    if (!v) throw ConfigError(key, "wrong type");
    return no_nul(key, *v);
}

std::vector<std::string> config_strings(const std::string& key, const toml::node& n) {
    if (auto s = n.value<std::string>()) return {no_nul(key, *s)};
    const toml::array* a = n.as_array();
    if (!a) throw ConfigError(key, "expected a string or a list of strings");
    std::vector<std::string> out;
    for (const auto& e : *a) {
        auto s = e.value<std::string>();
        if (!s) throw ConfigError(key, "expected a list of strings");
        out.push_back(no_nul(key, *s));
    }
    return out;
}

// JSON's string escapes are TOML's.
std::string toml_string(std::string_view s) { return json_string(s); }

} // namespace smx
