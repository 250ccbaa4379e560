// smx configuration: one TOML file; every key has a default (docs/config.md).
// The members below hold the keys' values, their initializers are the
// defaults; each key is declared once, as a row of smx::config_keys()
// (config_keys.cpp), which names the member it sets.
#pragma once

#include "libsm/dnsbl_site.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace smx {

// A configuration error names the offending key.
struct ConfigError : std::runtime_error {
    ConfigError(const std::string& key, const std::string& what)
        : std::runtime_error(key + ": " + what), key(key) {}
    std::string key;
};

struct HostPort {
    std::string host;
    std::uint16_t port = 25;
    bool literal = false;  // written as [host]: no MX lookup
    std::string str() const;
    // "host:port", brackets only around an IPv6 address: literal or not.
    std::string address() const;
};

// "192.0.2.1" or "2001:db8::1".
bool ip_address(const std::string& s);

// "[host]:port", "host:port" or "host"; throws ConfigError(key, ...).
HostPort parse_hostport(const std::string& key, const std::string& s,
                        std::uint16_t default_port);

// A service's socket, as postfix writes it: "inet:host:port" (host a name,
// an address or "[v6addr]") or "unix:/path".
struct ServiceSocket {
    std::string text;  // as written
    std::string host;  // inet: host and port; unix: path
    std::uint16_t port = 0;
    std::string path;
    bool operator==(const ServiceSocket&) const = default;
};
// Throws ConfigError(key, ...) for anything else.
ServiceSocket parse_service_socket(const std::string& key, const std::string& s);

// Where SMTPS asks the policy services (policy.policy_service_stages).
enum class PolicyStage { connect, helo, mail, rcpt, data, end_of_data };

struct Cidr {
    bool v6 = false;
    unsigned char addr[16] = {};
    unsigned prefix = 0;
    // addr is "1.2.3.4" or "::1" (v4-mapped v6 matches v4 networks too).
    bool contains(const std::string& addr) const;
    // "10.0.0.0/8", "::1/128": the address as given, host bits and all.
    std::string str() const;
};
Cidr parse_cidr(const std::string& key, const std::string& s);

// A next hop route: "mx" (MX lookup of the recipient domain) or hosts.
struct Route {
    bool mx = false;
    std::vector<HostPort> hosts;
    // The nexthop strings used in DELIVER records.
    std::vector<std::string> nexthops() const;
};

// STARTTLS (server.tls_security_level): none (not offered), may (offered),
// encrypt (required before MAIL, RCPT and DATA).
enum class TlsLevel { none, may, encrypt };

// server.processes at most: each has its own stream of queue ids (smx::new_ta_id).
inline constexpr unsigned max_smtps_processes = 16;

struct ServerConfig {
    std::vector<HostPort> listen{{"127.0.0.1", 2525, true}};
    std::string hostname;  // default: the system host name
    std::uint64_t max_message_size = 10u << 20;
    unsigned max_recipients = 1000;
    std::vector<Cidr> relay_networks{
        Cidr{.v6 = false, .addr = {127}, .prefix = 8},
        Cidr{.v6 = true, .addr = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, .prefix = 128}};
    // The client address is in relay_networks (SMTPS: may relay anywhere;
    // QMGR: its mail gets DSNs even with queue.bounce_untrusted off).
    bool in_relay_networks(const std::string& ip) const;
    std::vector<std::string> relay_domains;
    unsigned max_connections = 2000;
    // Counted by QMGR's anvil across all smx-smtps loops and processes;
    // 0: no limit. Exempt: as [anvil] says.
    unsigned max_connections_per_client = 50;
    // Mail transactions SMTPS runs at once (0: no limit); a MAIL past it
    // waits at most transaction_wait for one to end (smtps/transaction_gate).
    unsigned max_transactions = 100;
    std::chrono::milliseconds transaction_wait{2000};
    std::chrono::seconds command_timeout{300};
    std::chrono::seconds data_timeout{300};
    // DATA must go on at this many bytes a second on average (postfix's
    // smtpd_min_data_rate): the whole DATA phase ends data_timeout plus
    // received bytes / min_data_rate after it began. 0: no such bound.
    unsigned min_data_rate = 500;
    // Recipients whose local part routes elsewhere ('@', '%', '!') from
    // clients outside relay_networks (postfix: allow_untrusted_routing).
    bool allow_untrusted_routing = false;
    unsigned max_errors = 10;
    // NOOP, VRFY, RSET and HELP in a session before each further one counts
    // as an error (postfix: smtpd_junk_command_limit); a queued message
    // starts the count again.
    unsigned max_junk_commands = 100;
    unsigned max_hops = 100;
    unsigned max_line_length = 512;
    bool reject_bare_lf = true;  // false: normalise bare LF / CR to CRLF
    std::string tls_cert;  // PEM chain
    std::string tls_key;
    TlsLevel tls_security_level = TlsLevel::none;  // may when tls_cert is set
    unsigned threads = 0;  // SMTPS event loops; 0: one per CPU it may run on
    // smx-smtps processes; 0: as many as max_connections needs under the
    // descriptor limit of one process (smx::smtps_layout).
    unsigned processes = 0;
    // Accounts of the children when `smx run` starts as root: each its own
    // user (sendmail X's smxs/smxq/smxc), the primary group of all three
    // the shared `group` (content files, qmgr.sock, the log file). `user`
    // set: all three run as that one account instead (one-user mode).
    std::string user;
    std::string smtps_user = "smxs";
    std::string qmgr_user = "smxq";
    std::string smtpc_user = "smxc";
    std::string group = "smx";
    // Local submission: smx-postdrop is setgid to this group, which alone
    // may create files in the maildrop (docs/design.md, Local submission).
    std::string maildrop_group = "smxdrop";
    // The account a child runs as when started by root: `user` when set,
    // else that child's own.
    enum class Process { smtps, qmgr, smtpc };
    const std::string& user_for(Process p) const;
    // `smx` commands QMGR serves besides root and its own user: every one
    // to admin_group, stats and queue also to stats_group. Empty: nobody.
    std::string admin_group;
    std::string stats_group;
};

struct QueueConfig {
    std::string spool_dir = "./var/spool";
    std::string run_dir = "./var/run";
    // The content files and the envelope log, each possibly on a file
    // system of its own (a dedicated log device); empty: <spool_dir>/cdb
    // and <spool_dir>/ibdb. Read through Config::content_dir_abs() and
    // ibdb_dir_abs().
    std::string content_dir;
    std::string ibdb_dir;
    // commit_policy = "adaptive" (true, the default) or "fixed" (false);
    // adaptive: commit_interval is only the ceiling of a batch's wait.
    bool commit_adaptive = true;
    std::chrono::microseconds commit_interval{1000};
    unsigned commit_max_batch = 256;
    std::uint64_t ibdb_file_size = 16u << 20;
    bool cdb_hashed = true;
    // Small messages go to content segments rather than a file each
    // (libsm/content_segment.hpp, docs/design.md).
    bool content_segments = true;
    // QMGR names no segment older than this and removes older ones nothing
    // names; SMTPS appends to one for a sixth of it. 30 s; test builds may
    // shorten it (test_segment_age) so that tests see segments go.
    std::chrono::seconds segment_age{30};
    // batch: SMTPS writes content files without a sync and QMGR's group
    // commit makes them durable with the batch (syncfs); file: SMTPS
    // fdatasyncs each content file itself (docs/design.md).
    enum class ContentSync { batch, file };
    ContentSync content_sync = ContentSync::batch;
    // Test builds only (-Dtest_hooks=true; load_config refuses it
    // otherwise): no fsync, fdatasync or syncfs of the IBDB, content files
    // or DEFEDB commits, for the seed's "fsync off" store experiment.
    bool test_no_sync = false;
    unsigned aq_max_entries = 100000;
    std::chrono::seconds retry_min{300};
    std::chrono::seconds retry_max{3600};
    std::chrono::seconds max_queue_lifetime{5 * 24 * 3600};
    std::uint64_t min_free_space = 100u << 20;  // bytes; below it intake pauses
    // A content file no transaction names, older than this, is an orphan
    // (its sender never got a 250) and is moved to quarantine/.
    std::chrono::seconds orphan_age{600};
    // A message still deferred this long after arrival gets one delay
    // warning DSN to its sender; 0 = never (postfix's delay_warning_time).
    std::chrono::seconds delay_warning_time{0};
    // A delivery SMTPC has not answered for this long is taken back and its
    // recipients retried later: SMTPC bounds each delivery itself, so only a
    // stuck SMTPC gets here.
    std::chrono::seconds max_delivery_time{3600};
    // Permanent failures (5xx) are retried like temporary ones (postfix's
    // soft_bounce): nothing bounces while a next hop is misconfigured.
    bool soft_bounce = false;
    // DSNs for mail that came from clients outside server.relay_networks
    // (mail for relay_domains, whose sender anyone can forge): false logs
    // the failure and sends none, so smx cannot be used for backscatter.
    bool bounce_untrusted = true;
    // Routing tables (qmgr/routing.hpp): transport(5) entries by recipient
    // address and domain, consulted before [routes]; next hops by sender
    // that replace the default route (postfix's sender_dependent_relayhost_maps).
    std::vector<std::string> transport_maps;
    std::vector<std::string> sender_dependent_relayhost_maps;
};

// [rewrite]: canonical and virtual alias rewriting of the envelope, done
// once before it is committed (libsm/rewrite.hpp). Lists of "type:name" tables.
struct RewriteConfig {
    std::string recipient_delimiter;  // e.g. "+"; empty: no address extensions
    std::vector<std::string> virtual_alias_maps;
    unsigned virtual_alias_recursion_limit = 1000;
    unsigned virtual_alias_expansion_limit = 1000;
    std::vector<std::string> canonical_maps;
    std::vector<std::string> sender_canonical_maps;
    std::vector<std::string> recipient_canonical_maps;
    // aliases(5) tables (keys are local names) for recipients in local_domains.
    // what newaliases builds.
    std::vector<std::string> alias_maps;
    std::vector<std::string> local_domains;  // default: server.hostname
};

// Outbound STARTTLS (client.tls_security_level, [tls_policy]): none (never),
// may (when offered; plaintext again if the handshake fails), encrypt (TLS
// or defer), verify (encrypt, and the certificate must chain to
// client.tls_ca_file and name the next hop, or defer).
enum class ClientTls { none, may, encrypt, verify };

struct ClientConfig {
    std::chrono::seconds connect_timeout{30};
    std::chrono::seconds command_timeout{300};
    std::chrono::seconds idle_timeout{5};
    // One delivery attempt (DNS, connects, the whole transaction) ends after
    // this, however the next hop stalls; its recipients are retried later.
    std::chrono::seconds delivery_timeout{1200};
    unsigned max_msgs_per_connection = 1000;
    unsigned initial_concurrency = 5;
    unsigned max_concurrency = 20;
    // Per destination at most rate_limit deliveries per rate_interval,
    // evenly spaced (QMGR's scheduler); 0: no limit. Reloadable.
    unsigned rate_limit = 0;
    std::chrono::seconds rate_interval{1};
    std::string helo_name;  // default: server.hostname
    ClientTls tls_security_level = ClientTls::may;
    std::string tls_ca_file;  // PEM CAs for verify; empty: the system's
    // Smart-host credentials per next hop (smx::load_credentials); empty: no
    // AUTH. Only SMTPC and check-config read the file.
    std::string sasl_password_file;
    // Name servers for MX and address lookups, "ip" or "ip:port" ("[v6]:port");
    // empty: the system resolver (/etc/resolv.conf).
    std::vector<std::string> dns_servers;
    // The port of hosts found by MX lookup ("mx" routes, implicit MX).
    std::uint16_t smtp_port = 25;
    // dns_servers as c-ares takes them ("1.2.3.4:53,[::1]:53").
    std::string dns_servers_csv() const;
};

struct LogConfig {
    std::string level = "info";
    std::string file;  // empty: stderr (or syslog)
    // A syslog datagram socket ("/dev/log", which journald serves too);
    // empty: off. At most one of file and syslog is set.
    std::string syslog;
    int syslog_facility = 2;  // LOG_MAIL >> 3: RFC 5424 facility code
    // Before each program's name ("smx/qmgr"), as postfix's syslog_name:
    // "postfix-smx" makes fail2ban's stock postfix filter match as it is.
    std::string syslog_name = "smx";
};

struct StatsConfig {
    std::string listen;  // Prometheus text on http://listen/metrics; empty: off
};

// [policy]: what SMTPS asks of a client before it takes mail. The client
// name keys are issue 28's item 7 (smtps/client_check.hpp).
struct PolicyConfig {
    // access(5) tables at each stage: the client (name, then address and its
    // networks), the HELO name, the sender, the recipient.
    std::vector<std::string> client_access, helo_access, sender_access, recipient_access;
    // The known recipients of relay_domains; empty: every local part.
    std::vector<std::string> relay_recipient_maps;
    // Refusals of the client answered at RCPT, not at connect (postfix's
    // smtpd_delay_reject), so that the log shows sender and recipient.
    bool delay_reject = true;
    // The client's name: PTR, confirmed by an address lookup of the name
    // (postfix's "name[ip]"); false: every client is unknown.
    bool client_name_lookup = true;
    std::chrono::milliseconds client_name_timeout{5000};
    // Clients without a confirmed name get 450 4.7.25 (the lookup failed
    // for now) or 550 5.7.25 (postfix's reject_unknown_client_hostname).
    bool reject_unknown_client_hostname = false;
    // postfix's header_checks and body_checks (docs/policy.md): pcre: or
    // regexp: tables (any type works) whose results are actions on each
    // header field and each body line; the header section checked up to
    // header_size_limit bytes, the body up to body_checks_size_limit.
    std::vector<std::string> header_checks, body_checks;
    std::uint64_t header_size_limit = 102400;
    std::uint64_t body_checks_size_limit = 51200;
    // Policy delegation (postfix's check_policy_service, SMTPD_POLICY_README),
    // asked in this order at these stages (docs/policy.md).
    std::vector<ServiceSocket> policy_services;
    std::vector<PolicyStage> policy_service_stages{PolicyStage::rcpt};
    std::chrono::milliseconds policy_service_timeout{100000};  // connect, write, reply
    std::chrono::milliseconds policy_service_max_idle{300000};  // an unused connection closes
    std::chrono::milliseconds policy_service_max_ttl{1000000};  // a connection's whole life
    unsigned policy_service_request_limit = 0;  // requests per connection; 0: no limit
    unsigned policy_service_try_limit = 2;
    std::chrono::milliseconds policy_service_retry_delay{1000};
    // What a stage does when no service answered (an access(5) action).
    std::string policy_service_default_action = "451 4.3.5 Server configuration problem";
    bool asks_policy(PolicyStage s) const {
        return !policy_services.empty() &&
               std::find(policy_service_stages.begin(), policy_service_stages.end(), s) !=
                   policy_service_stages.end();
    }
};

// [dnsbl]: DNS block and allow lists asked at connect (postscreen's
// postscreen_dnsbl_* parameters).
struct DnsblConfig {
    std::vector<DnsblSite> sites;
    int threshold = 1;             // a score this high or higher: blocked
    int whitelist_threshold = -1;  // this low or lower: allow-listed
    std::chrono::milliseconds timeout{10000};  // per query; then not listed
    bool reject = true;                        // action: "reject"; false: "ignore" (log only)
    // The client must not talk before the greeting, which waits this long
    // (postscreen_greet_wait); 0: no such wait.
    std::chrono::milliseconds pregreet_wait{0};
};

// Per-client limits (postfix's anvil): SMTPS asks QMGR's table, which
// counts them for all smx-smtps loops and processes (docs/design.md).
// Each rate counts over rate_time_unit; 0: no limit.
struct AnvilConfig {
    std::chrono::seconds rate_time_unit{60};
    unsigned connection_rate_limit = 0;
    unsigned message_rate_limit = 0;
    unsigned recipient_rate_limit = 0;
    // IPv6 clients are counted by their network of this many bits.
    unsigned ipv6_prefix = 64;
    // Clients never counted: these, and relay_networks unless
    // exempt_relay_networks is false.
    std::vector<Cidr> exceptions;
    bool exempt_relay_networks = true;
    // Clients QMGR's table tracks at most; the least recently seen one
    // without a connection goes first.
    unsigned max_clients = 100000;
    // The client is counted (not exempt); trusted: in relay_networks.
    bool counts(const std::string& ip, bool trusted) const;
};



// [milter]: sendmail milters (protocol 6) that SMTPS and smx-pickup consult
// (docs/milter.md).
enum class MilterAction { tempfail, accept, reject, quarantine };
// One milter of a list: its socket, and what it sets itself of [milter]'s
// defaults.
struct MilterEntry {
    std::string socket;  // "inet:host:port" or "unix:/path"
    std::optional<MilterAction> default_action;
    std::optional<std::chrono::milliseconds> connect_timeout, command_timeout, content_timeout;
    bool operator==(const MilterEntry&) const = default;
};
struct MilterConfig {
    std::vector<MilterEntry> smtpd_milters;      // every SMTP session, in this order
    std::vector<MilterEntry> non_smtpd_milters;  // mail from the sendmail command
    // A listener's own list instead of smtpd_milters, keyed by its address
    // as HostPort::address() writes it ("0.0.0.0:587", "[::1]:25").
    std::map<std::string, std::vector<MilterEntry>> listener_milters;
    std::chrono::milliseconds connect_timeout{30000};
    std::chrono::milliseconds command_timeout{30000};
    std::chrono::milliseconds content_timeout{300000};
    MilterAction default_action = MilterAction::tempfail;
    unsigned protocol = 6;  // 2, 3, 4 or 6
    // The milters of a session that came in on listener `address`.
    const std::vector<MilterEntry>& for_listener(const std::string& address) const;
};

struct Config {
    std::string path;  // the file it came from, empty for built-in defaults
    ServerConfig server;
    QueueConfig queue;
    ClientConfig client;
    LogConfig log;
    StatsConfig stats;
    PolicyConfig policy;
    DnsblConfig dnsbl;
    AnvilConfig anvil;
    RewriteConfig rewrite;
    MilterConfig milter;
    std::map<std::string, Route> routes;  // lower-case domain → route
    // Without routes (no or an empty [routes] table): "mx", every domain by
    // its MX, as postfix; routes but no default key: none (others wait).
    std::optional<Route> default_route;
    std::map<std::string, ClientTls> tls_policy;  // lower-case domain → level

    // The outbound TLS level for a recipient domain: [tls_policy] matched as
    // [routes] is, else client.tls_security_level.
    ClientTls tls_for(const std::string& domain) const;

    // Route for a recipient domain: exact match, then parent domains, then
    // the default; nullopt when nothing applies.
    const Route* route_for(const std::string& domain) const;

    std::string qmgr_socket() const { return run_dir_abs() + "/qmgr.sock"; }
    std::string run_dir_abs() const;
    std::string spool_dir_abs() const;
    // The one place the stores' directories are derived (absolute, no
    // trailing slash): content files, envelope log, deferred queue,
    // quarantine. Only the first two can be moved out of the spool.
    std::string content_dir_abs() const;
    std::string ibdb_dir_abs() const;
    std::string defedb_dir_abs() const;
    std::string quarantine_dir_abs() const;
    // Local submission: smx-postdrop writes into the maildrop, smx-pickup
    // takes from it and moves what it refuses to the maildrop quarantine.
    std::string maildrop_dir_abs() const;
    std::string maildrop_quarantine_dir_abs() const;

private:
    std::string in_spool(const char* name) const;
};

// Loads and validates; empty path = built-in defaults. Throws ConfigError.
Config load_config(const std::string& path);

} // namespace smx
