#include "libsm/build_options.hpp"
#include "libsm/config.hpp"
#include "libsm/config_keys.hpp"
#include "libsm/config_reload.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

using namespace smx;

namespace {
std::string write_temp(const std::string& text) {
    char path[] = "/tmp/smx-config-test-XXXXXX";
    const int fd = ::mkstemp(path);
    REQUIRE(fd >= 0);
    ::close(fd);
    std::ofstream(path) << text;
    return path;
}

// The key named in the ConfigError thrown for `text`.
std::string error_key(const std::string& text) {
    const auto p = write_temp(text);
    try {
        load_config(p);
    } catch (const ConfigError& e) {
        std::remove(p.c_str());
        return e.key;
    }
    std::remove(p.c_str());
    return "<no error>";
}
} // namespace

TEST_CASE("built-in defaults never make an open relay") {
    const Config c = load_config("");
    REQUIRE(c.server.listen.size() == 1);
    CHECK(c.server.listen[0].host == "127.0.0.1");
    CHECK(c.server.listen[0].port == 2525);
    CHECK(c.server.relay_networks.size() == 2);
    CHECK(c.server.relay_networks[0].contains("127.0.0.1"));
    CHECK(c.server.relay_networks[1].contains("::1"));
    CHECK_FALSE(c.server.relay_networks[0].contains("10.0.0.1"));
    CHECK(c.server.relay_domains.empty());
    // No [routes]: every domain by its MX, as postfix does.
    REQUIRE(c.default_route);
    CHECK(c.default_route->mx);
    CHECK(c.client.dns_servers.empty());
    CHECK(c.client.smtp_port == 25);
    CHECK(c.queue.commit_interval.count() == 1000);
    CHECK(c.queue.commit_adaptive);
    CHECK(c.queue.spool_dir == "./var/spool");
}

TEST_CASE("commit_policy is adaptive or fixed") {
    const auto p = write_temp("[queue]\ncommit_policy = \"fixed\"\n");
    CHECK_FALSE(load_config(p).queue.commit_adaptive);
    std::remove(p.c_str());
    CHECK(error_key("[queue]\ncommit_policy = \"auto\"\n") == "queue.commit_policy");
    CHECK(error_key("[queue]\ncommit_policy = 1\n") == "queue.commit_policy");
}

TEST_CASE("a full config file is read") {
    const auto p = write_temp(R"(
[server]
listen = ["127.0.0.1:2600", "[::1]:2601"]
hostname = "relay.example.org"
max_message_size = 2048
relay_networks = ["192.0.2.0/24"]
relay_domains = ["Example.NET"]
bare_lf = "normalize"
[queue]
spool_dir = "/tmp/x/spool"
commit_interval_us = 0
commit_max_batch = 10
orphan_age = 30
delay_warning_time = 14400
[routes]
default = "[127.0.0.1]:2700"
"example.net" = ["[10.0.0.1]:25", "backup.example.net"]
".example.com" = "mx"
)");
    const Config c = load_config(p);
    std::remove(p.c_str());
    CHECK(c.server.listen[1].host == "::1");
    CHECK(c.server.listen[1].port == 2601);
    CHECK(c.server.hostname == "relay.example.org");
    CHECK(c.server.max_message_size == 2048);
    CHECK(c.server.relay_networks[0].contains("192.0.2.77"));
    CHECK_FALSE(c.server.relay_networks[0].contains("192.0.3.1"));
    CHECK(c.server.relay_domains == std::vector<std::string>{"example.net"});
    CHECK_FALSE(c.server.reject_bare_lf);
    CHECK(c.queue.commit_interval.count() == 0);
    CHECK(c.queue.commit_max_batch == 10);
    CHECK(c.queue.orphan_age == std::chrono::seconds(30));
    CHECK(c.queue.delay_warning_time == std::chrono::hours(4));
    REQUIRE(c.route_for("EXAMPLE.net"));
    CHECK(c.route_for("example.net")->nexthops() ==
          std::vector<std::string>{"[10.0.0.1]:25", "backup.example.net:25"});
    CHECK(c.route_for("a.b.example.com")->mx);
    CHECK(c.route_for("example.com")->nexthops() == std::vector<std::string>{"[127.0.0.1]:2700"});
    CHECK(c.route_for("other.org")->nexthops() == std::vector<std::string>{"[127.0.0.1]:2700"});
}

TEST_CASE("bad configs name the offending key") {
    CHECK(error_key("[server]\nlisten = [\"127.0.0.1:99999\"]\n") == "server.listen");
    CHECK(error_key("[server]\nlisten = [\"127.0.0.1:x\"]\n") == "server.listen");
    CHECK(error_key("[server]\nlisten = 25\n") == "server.listen");
    CHECK(error_key("[server]\nrelay_networks = [\"10.0.0.0/33\"]\n") == "server.relay_networks");
    CHECK(error_key("[server]\nrelay_networks = [\"not-an-ip\"]\n") == "server.relay_networks");
    CHECK(error_key("[server]\nmax_recipents = 5\n") == "server.max_recipents");
    CHECK(error_key("[server]\nmax_message_size = -1\n") == "server.max_message_size");
    CHECK(error_key("[server]\nmax_message_size = \"big\"\n") == "server.max_message_size");
    CHECK(error_key("[server]\nbare_lf = \"maybe\"\n") == "server.bare_lf");
    CHECK(error_key("[queue]\ncommit_max_batch = 0\n") == "queue.commit_max_batch");
    CHECK(error_key("[queue]\nretry_min = 100\nretry_max = 10\n") == "queue.retry_max");
    CHECK(error_key("[queue]\norphan_age = 5\n") == "queue.orphan_age");
    CHECK(error_key("[queue]\ndelay_warning_time = -1\n") == "queue.delay_warning_time");
    CHECK(error_key("[routes]\n\"example.net\" = \"[127.0.0.1\"\n") == "routes.example.net");
    CHECK(error_key("[routes]\ndefault = []\n") == "routes.default");
    CHECK(error_key("[bogus]\nx = 1\n") == "bogus");
    CHECK(error_key("[log]\nlevel = \"loud\"\n") == "log.level");
    CHECK(error_key("[server\n") != "<no error>");
}

TEST_CASE("CIDR matching") {
    CHECK(parse_cidr("k", "10.0.0.0/8").contains("10.255.1.2"));
    CHECK_FALSE(parse_cidr("k", "10.0.0.0/8").contains("11.0.0.1"));
    CHECK(parse_cidr("k", "10.1.2.128/25").contains("10.1.2.200"));
    CHECK_FALSE(parse_cidr("k", "10.1.2.128/25").contains("10.1.2.100"));
    CHECK(parse_cidr("k", "127.0.0.0/8").contains("::ffff:127.0.0.1"));
    CHECK(parse_cidr("k", "2001:db8::/32").contains("2001:db8::5"));
    CHECK_FALSE(parse_cidr("k", "2001:db8::/32").contains("2001:db9::5"));
    CHECK(parse_cidr("k", "0.0.0.0/0").contains("8.8.8.8"));
    CHECK_FALSE(parse_cidr("k", "10.0.0.1").contains("garbage"));
}

TEST_CASE("limits whose worst-case envelope cannot be encoded are refused") {
    CHECK(error_key("[server]\nmax_recipients = 5000\n") == "<no error>");
    CHECK(error_key("[server]\nmax_recipients = 10000\n") == "server.max_recipients");
    CHECK(error_key("[server]\nmax_recipients = 2000\nmax_line_length = 4096\n") ==
          "server.max_recipients");
}

TEST_CASE("a [routes] table without default routes nothing else") {
    const auto p = write_temp("[routes]\n\"example.net\" = \"[127.0.0.1]:2600\"\n");
    const Config c = load_config(p);
    CHECK_FALSE(c.default_route);
    CHECK_FALSE(c.route_for("example.org"));
    const auto empty = write_temp("[routes]\n");
    REQUIRE(load_config(empty).default_route);
    CHECK(load_config(empty).default_route->mx);
}

TEST_CASE("client.dns_servers and client.smtp_port") {
    const auto p = write_temp(
        "[client]\ndns_servers = [\"127.0.0.1\", \"127.0.0.2:5353\", \"[::1]:53\", \"::1\"]\n"
        "smtp_port = 2525\n");
    const Config c = load_config(p);
    CHECK(c.client.dns_servers.size() == 4);
    CHECK(c.client.dns_servers_csv() == "127.0.0.1:53,127.0.0.2:5353,[::1]:53,[::1]:53");
    CHECK(c.client.smtp_port == 2525);
    CHECK(error_key("[client]\ndns_servers = \"127.0.0.1\"\n") == "<no error>");
    CHECK(error_key("[client]\ndns_servers = [\"ns.example.com\"]\n") == "client.dns_servers");
    CHECK(error_key("[client]\ndns_servers = [\"127.0.0.1:0\"]\n") == "client.dns_servers");
    CHECK(error_key("[client]\ndns_servers = [\"127.0.0.1:x\"]\n") == "client.dns_servers");
    CHECK(error_key("[client]\ndns_servers = [\"\"]\n") == "client.dns_servers");
    CHECK(error_key("[client]\ndns_servers = [1]\n") == "client.dns_servers");
    CHECK(error_key("[client]\nsmtp_port = 0\n") == "client.smtp_port");
    CHECK(error_key("[client]\nsmtp_port = 65536\n") == "client.smtp_port");
}

TEST_CASE("client.rate_limit and rate_interval: off by default, bounded, reloadable") {
    const Config d = load_config("");
    CHECK(d.client.rate_limit == 0);
    CHECK(d.client.rate_interval == std::chrono::seconds(1));
    const Config c = load_config(write_temp("[client]\nrate_limit = 600\nrate_interval = 60\n"));
    CHECK(c.client.rate_limit == 600);
    CHECK(c.client.rate_interval == std::chrono::seconds(60));
    CHECK(error_key("[client]\nrate_limit = 0\n") == "<no error>");
    CHECK(error_key("[client]\nrate_limit = -1\n") == "client.rate_limit");
    CHECK(error_key("[client]\nrate_limit = 1000001\n") == "client.rate_limit");
    CHECK(error_key("[client]\nrate_interval = 0\n") == "client.rate_interval");
    Config next = c;
    next.client.rate_limit = 10;
    CHECK(keep_restart_only(c, next).empty());  // the scheduler takes it at reload
    CHECK(next.client.rate_limit == 10);
}

TEST_CASE("hardening keys and their bounds") {
    const Config d = load_config("");
    CHECK(d.server.min_data_rate == 500);
    CHECK_FALSE(d.server.allow_untrusted_routing);
    CHECK(d.client.delivery_timeout == std::chrono::seconds(1200));
    CHECK(d.queue.max_delivery_time == std::chrono::seconds(3600));
    CHECK_FALSE(d.queue.soft_bounce);
    CHECK(d.queue.bounce_untrusted);
    CHECK(error_key("[server]\nmin_data_rate = 0\n") == "<no error>");
    CHECK(error_key("[server]\nallow_untrusted_routing = \"yes\"\n") == "server.allow_untrusted_routing");
    CHECK(error_key("[client]\ndelivery_timeout = 4000\n") == "queue.max_delivery_time");
    CHECK(error_key("[queue]\nmax_delivery_time = 0\n") == "queue.max_delivery_time");
}

TEST_CASE("server.max_junk_commands: default, zero and bounds") {
    CHECK(load_config("").server.max_junk_commands == 100);
    const auto p = write_temp("[server]\nmax_junk_commands = 0\n");
    const Config c = load_config(p);
    std::remove(p.c_str());
    CHECK(c.server.max_junk_commands == 0);
    CHECK(error_key("[server]\nmax_junk_commands = -1\n") == "server.max_junk_commands");
    CHECK(error_key("[server]\nmax_junk_commands = 1000001\n") == "server.max_junk_commands");
    CHECK(error_key("[server]\nmax_junk_commands = \"100\"\n") == "server.max_junk_commands");
}

TEST_CASE("server.max_transactions and transaction_wait_ms: defaults and bounds") {
    const Config d = load_config("");
    CHECK(d.server.max_transactions == 100);
    CHECK(d.server.transaction_wait == std::chrono::milliseconds(2000));
    const auto p = write_temp("[server]\nmax_transactions = 0\ntransaction_wait_ms = 250\n");
    const Config c = load_config(p);
    std::remove(p.c_str());
    CHECK(c.server.max_transactions == 0);
    CHECK(c.server.transaction_wait == std::chrono::milliseconds(250));
    CHECK(error_key("[server]\nmax_transactions = -1\n") == "server.max_transactions");
    CHECK(error_key("[server]\ntransaction_wait_ms = 60001\n") == "server.transaction_wait_ms");
    CHECK(error_key("[server]\ntransaction_wait_ms = \"2s\"\n") == "server.transaction_wait_ms");
}

TEST_CASE("tls_security_level: its default follows the certificate, may/encrypt need one") {
    CHECK(load_config("").server.tls_security_level == TlsLevel::none);
    const std::string pair = "[server]\ntls_cert = \"c.pem\"\ntls_key = \"k.pem\"\n";
    auto level = [](const std::string& text) {
        const auto p = write_temp(text);
        const Config c = load_config(p);
        std::remove(p.c_str());
        return c.server.tls_security_level;
    };
    CHECK(level(pair) == TlsLevel::may);
    CHECK(level(pair + "tls_security_level = \"none\"\n") == TlsLevel::none);
    CHECK(level(pair + "tls_security_level = \"encrypt\"\n") == TlsLevel::encrypt);
    CHECK(error_key(pair + "tls_security_level = \"must\"\n") == "server.tls_security_level");
    CHECK(error_key("[server]\ntls_security_level = \"may\"\n") == "server.tls_security_level");
    CHECK(error_key("[server]\ntls_security_level = \"encrypt\"\n") ==
          "server.tls_security_level");
    CHECK(level("[server]\ntls_security_level = \"none\"\n") == TlsLevel::none);
    CHECK(error_key("[server]\ntls_cert = \"c.pem\"\n") == "server.tls_key");
}

TEST_CASE("tls_policy: domains match as routes do, else client.tls_security_level") {
    const auto p = write_temp("[client]\ntls_security_level = \"none\"\n"
                              "[tls_policy]\n\"Example.NET\" = \"encrypt\"\n"
                              "\".bank.example\" = \"verify\"\n\"x.bank.example\" = \"may\"\n");
    const Config c = load_config(p);
    std::remove(p.c_str());
    CHECK(c.tls_for("example.net") == ClientTls::encrypt);
    CHECK(c.tls_for("EXAMPLE.net") == ClientTls::encrypt);
    CHECK(c.tls_for("sub.example.net") == ClientTls::none);
    CHECK(c.tls_for("a.bank.example") == ClientTls::verify);
    CHECK(c.tls_for("x.bank.example") == ClientTls::may);
    CHECK(c.tls_for("other.org") == ClientTls::none);
    CHECK(load_config("").tls_for("other.org") == ClientTls::may);
    CHECK(error_key("[tls_policy]\n\"a.org\" = \"sometimes\"\n") == "tls_policy.a.org");
    CHECK(error_key("[tls_policy]\n\"a.org\" = 1\n") == "tls_policy.a.org");
    CHECK(error_key("[client]\ntls_security_level = \"always\"\n") ==
          "client.tls_security_level");
}

TEST_CASE("reload keeps the restart-only keys and names those that changed") {
    Config running;
    running.server.listen = {parse_hostport("server.listen", "127.0.0.1:2525", 25)};
    running.queue.spool_dir = "/var/spool/smx";
    Config next = running;
    next.server.listen = {parse_hostport("server.listen", "127.0.0.1:2526", 25)};
    next.queue.spool_dir = "/srv/spool";
    next.server.max_recipients = 7;
    next.server.relay_domains = {"example.net"};
    next.log.level = "debug";
    const auto kept = keep_restart_only(running, next);
    CHECK(kept == std::vector<std::string>{"server.listen", "queue.spool_dir"});
    CHECK(next.server.listen.front().port == 2525);
    CHECK(next.queue.spool_dir == "/var/spool/smx");
    // Everything else is the new file's.
    CHECK(next.server.max_recipients == 7);
    CHECK(next.server.relay_domains == std::vector<std::string>{"example.net"});
    CHECK(next.log.level == "debug");
    Config same = running;
    CHECK(keep_restart_only(running, same).empty());
}

TEST_CASE("queue.content_sync is batch or file, restart-only") {
    CHECK(load_config("").queue.content_sync == QueueConfig::ContentSync::batch);
    const auto p = write_temp("[queue]\ncontent_sync = \"file\"\n");
    CHECK(load_config(p).queue.content_sync == QueueConfig::ContentSync::file);
    std::remove(p.c_str());
    CHECK(error_key("[queue]\ncontent_sync = \"none\"\n") == "queue.content_sync");
}

TEST_CASE("queue.test_no_sync is honoured only by a test build") {
    const std::string text = "[queue]\ntest_no_sync = true\n";
#if SMX_TEST_HOOKS
    const auto p = write_temp(text);
    CHECK(load_config(p).queue.test_no_sync);
    std::remove(p.c_str());
#else
    CHECK(error_key(text) == "queue.test_no_sync");
#endif
    CHECK_FALSE(load_config("").queue.test_no_sync);
}

TEST_CASE("content segments: on by default; test_segment_age only in a test build, 3..3600") {
    const Config d = load_config("");
    CHECK(d.queue.content_segments);
    CHECK(d.queue.segment_age == std::chrono::seconds(30));
    const auto off = write_temp("[queue]\ncontent_segments = false\n");
    CHECK_FALSE(load_config(off).queue.content_segments);
    std::remove(off.c_str());
    CHECK(error_key("[queue]\ncontent_segments = \"no\"\n") == "queue.content_segments");
#if SMX_TEST_HOOKS
    const auto p = write_temp("[queue]\ntest_segment_age = 3\n");
    CHECK(load_config(p).queue.segment_age == std::chrono::seconds(3));
    std::remove(p.c_str());
    CHECK(error_key("[queue]\ntest_segment_age = 2\n") == "queue.test_segment_age");
    CHECK(error_key("[queue]\ntest_segment_age = 3601\n") == "queue.test_segment_age");
#else
    CHECK(error_key("[queue]\ntest_segment_age = 6\n") == "queue.test_segment_age");
#endif
}

TEST_CASE("content_dir and ibdb_dir: in the spool by default, else where named; restart-only") {
    const Config d = load_config("");
    const std::string spool = std::filesystem::current_path().string() + "/var/spool";
    CHECK(d.spool_dir_abs() == spool);
    CHECK(d.content_dir_abs() == spool + "/cdb");
    CHECK(d.ibdb_dir_abs() == spool + "/ibdb");
    CHECK(d.defedb_dir_abs() == spool + "/defedb");
    CHECK(d.quarantine_dir_abs() == spool + "/quarantine");

    // Relative paths resolve as spool_dir does; a trailing slash is dropped.
    const auto p = write_temp("[queue]\nspool_dir = \"/s/spool/\"\ncontent_dir = \"/fast/cdb/\"\n"
                              "ibdb_dir = \"log/ibdb\"\n");
    Config c = load_config(p);
    std::remove(p.c_str());
    CHECK(c.spool_dir_abs() == "/s/spool");
    CHECK(c.content_dir_abs() == "/fast/cdb");
    CHECK(c.ibdb_dir_abs() == std::filesystem::current_path().string() + "/log/ibdb");
    CHECK(c.defedb_dir_abs() == "/s/spool/defedb");
    CHECK(c.quarantine_dir_abs() == "/s/spool/quarantine");
    // A direct subdirectory of the spool is fine, and siblings of each other.
    CHECK(error_key("[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/s/content\"\n") == "<no error>");
    CHECK(error_key("[queue]\ncontent_dir = \"/d/cdb\"\nibdb_dir = \"/d/cdbx\"\n") == "<no error>");
    CHECK(error_key("[queue]\ncontent_dir = \"/d\"\nibdb_dir = \"/d/ibdb\"\n") == "queue.ibdb_dir");
    CHECK(error_key("[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/s/defedb\"\n") == "queue.content_dir");
    CHECK(error_key("[queue]\ncontent_dir = 1\n") == "queue.content_dir");

    Config next = c;
    next.queue.content_dir = "/other/cdb";
    next.queue.ibdb_dir = "";
    CHECK(keep_restart_only(c, next) == std::vector<std::string>{"queue.content_dir", "queue.ibdb_dir"});
    CHECK(next.content_dir_abs() == "/fast/cdb");
    CHECK(next.queue.ibdb_dir == "log/ibdb");
}

TEST_CASE("server.processes: 0 (as needed) by default, 1 to 16") {
    CHECK(load_config("").server.processes == 0);
    const auto p = write_temp("[server]\nprocesses = 16\n");
    CHECK(load_config(p).server.processes == 16);
    std::remove(p.c_str());
    CHECK(error_key("[server]\nprocesses = 17\n") == "server.processes");
    CHECK(error_key("[server]\nprocesses = -1\n") == "server.processes");
}

TEST_CASE("a NUL in any string setting is refused, not cut short") {
    // inet_pton would read "127.0.0.1\0garbage" as 127.0.0.1.
    CHECK(error_key("[server]\nrelay_networks = [\"127.0.0.1\\u0000x\"]\n") == "server.relay_networks");
    CHECK(error_key("[server]\nhostname = \"mx\\u0000.test\"\n") == "server.hostname");
    CHECK(error_key("[server]\nrelay_domains = \"a\\u0000b\"\n") == "server.relay_domains");
}

TEST_CASE("the config file: a directory, a FIFO or more than 4 MiB is refused, naming it") {
    auto message = [](const std::string& path) {
        try {
            load_config(path);
        } catch (const ConfigError& e) {
            CHECK(e.key == path);
            return std::string(e.what()).substr(path.size() + 2);
        }
        return std::string("<no error>");
    };
    char dir[] = "/tmp/smx-config-dir-XXXXXX";
    REQUIRE(::mkdtemp(dir));
    const std::string d = dir;
    CHECK(message(d) == "is a directory, not a config file");
    CHECK(message(d + "/missing.toml") == "cannot read: No such file or directory");
    // Opened without blocking: a FIFO nobody writes would hang smx for ever.
    REQUIRE(::mkfifo((d + "/fifo").c_str(), 0600) == 0);
    CHECK(message(d + "/fifo") == "is not a regular file");
    const std::string line = "# " + std::string(1021, 'x') + "\n";  // 1 KiB
    {
        std::ofstream f(d + "/big.toml");
        for (int i = 0; i < 4096; ++i) f << line;
    }
    CHECK(message(d + "/big.toml") == "<no error>");
    std::ofstream(d + "/big.toml", std::ios::app) << "\n";
    CHECK(message(d + "/big.toml") == "is larger than 4 MiB");
    std::filesystem::remove_all(d);
}

TEST_CASE("policy services: inet:host:port or unix:/path, known stages, a valid default action") {
    const Config d = load_config("");
    CHECK(d.policy.policy_services.empty());
    CHECK(d.policy.policy_service_stages == std::vector<PolicyStage>{PolicyStage::rcpt});
    CHECK_FALSE(d.policy.asks_policy(PolicyStage::rcpt));  // no service
    CHECK(d.policy.policy_service_default_action == "451 4.3.5 Server configuration problem");
    const auto p = write_temp(
        "[policy]\npolicy_services = [\"inet:127.0.0.1:10023\", \"unix:/run/spf.sock\", "
        "\"inet:[::1]:99\"]\npolicy_service_stages = [\"mail\", \"end_of_data\"]\n"
        "policy_service_timeout = \"2s\"\npolicy_service_request_limit = 5\n"
        "policy_service_default_action = \"DUNNO\"\n");
    const Config c = load_config(p);
    std::remove(p.c_str());
    REQUIRE(c.policy.policy_services.size() == 3);
    CHECK(c.policy.policy_services[0].host == "127.0.0.1");
    CHECK(c.policy.policy_services[0].port == 10023);
    CHECK(c.policy.policy_services[1].path == "/run/spf.sock");
    CHECK(c.policy.policy_services[2].host == "::1");
    CHECK(c.policy.asks_policy(PolicyStage::end_of_data));
    CHECK_FALSE(c.policy.asks_policy(PolicyStage::rcpt));
    CHECK(c.policy.policy_service_timeout == std::chrono::seconds(2));
    CHECK(c.policy.policy_service_request_limit == 5);
    for (const char* bad : {"\"127.0.0.1:10023\"", "\"inet:127.0.0.1\"", "\"inet:host:0\"",
                            "\"unix:relative\"", "\"tcp:1.2.3.4:5\"", "\"inet:[::1]\""})
        CHECK(error_key(std::string("[policy]\npolicy_services = [") + bad + "]\n") ==
              "policy.policy_services");
    CHECK(error_key("[policy]\npolicy_service_stages = [\"rcpt\", \"quit\"]\n") ==
          "policy.policy_service_stages");
    CHECK(error_key("[policy]\npolicy_service_default_action = \"MAYBE\"\n") ==
          "policy.policy_service_default_action");
    CHECK(error_key("[policy]\npolicy_service_default_action = \"450\"\n") ==
          "policy.policy_service_default_action");
    CHECK(error_key("[policy]\npolicy_service_try_limit = 0\n") == "policy.policy_service_try_limit");
    CHECK(error_key("[policy]\npolicy_service_timeout = \"10ms\"\n") ==
          "policy.policy_service_timeout");
}

TEST_CASE("[milter]: lists of sockets or inline tables, checked at load") {
    const auto p = write_temp(
        "[server]\nlisten = [\"127.0.0.1:25\", \"[::1]:587\"]\n"
        "[milter]\nsmtpd_milters = [\"inet:127.0.0.1:8891\", { socket = \"unix:/run/m.sock\", "
        "default_action = \"accept\", command_timeout = \"10s\", content_timeout = \"500ms\" }]\n"
        "non_smtpd_milters = \"unix:/run/dkim.sock\"\n"
        "listener_milters = { \"[::1]:587\" = [] }\n"
        "default_action = \"reject\"\ncommand_timeout = \"5s\"\nprotocol = 4\n");
    const Config c = load_config(p);
    std::remove(p.c_str());
    REQUIRE(c.milter.smtpd_milters.size() == 2);
    CHECK(c.milter.smtpd_milters[0] == MilterEntry{"inet:127.0.0.1:8891", {}, {}, {}, {}});
    const auto& m = c.milter.smtpd_milters[1];
    CHECK(m.socket == "unix:/run/m.sock");
    CHECK(m.default_action == MilterAction::accept);
    CHECK(m.command_timeout == std::chrono::seconds(10));
    CHECK(m.content_timeout == std::chrono::milliseconds(500));
    CHECK_FALSE(m.connect_timeout);
    REQUIRE(c.milter.non_smtpd_milters.size() == 1);
    CHECK(c.milter.default_action == MilterAction::reject);
    CHECK(c.milter.command_timeout == std::chrono::seconds(5));
    CHECK(c.milter.protocol == 4);
    CHECK(c.milter.for_listener("127.0.0.1:25").size() == 2);
    CHECK(c.milter.for_listener("[::1]:587").empty());
    CHECK(find_config_key("milter.smtpd_milters")->member.show(c) ==
          "[\"inet:127.0.0.1:8891\", { socket = \"unix:/run/m.sock\", default_action = "
          "\"accept\", command_timeout = \"10s\", content_timeout = \"500ms\" }]");
    CHECK(find_config_key("milter.listener_milters")->member.show(c) == "{ \"[::1]:587\" = [] }");

    CHECK(error_key("[milter]\nsmtpd_milters = [\"tcp:1.2.3.4:5\"]\n") == "milter.smtpd_milters");
    CHECK(error_key("[milter]\nsmtpd_milters = [\"inet:host\"]\n") == "milter.smtpd_milters");
    CHECK(error_key("[milter]\nnon_smtpd_milters = [\"unix:rel\"]\n") == "milter.non_smtpd_milters");
    CHECK(error_key("[milter]\nsmtpd_milters = [{ default_action = \"accept\" }]\n") ==
          "milter.smtpd_milters");
    CHECK(error_key("[milter]\nsmtpd_milters = [{ socket = \"inet:a:1\", "
                    "default_action = \"maybe\" }]\n") == "milter.smtpd_milters.default_action");
    CHECK(error_key("[milter]\nsmtpd_milters = [{ socket = \"inet:a:1\", timeout = 1 }]\n") ==
          "milter.smtpd_milters.timeout");
    CHECK(error_key("[milter]\nsmtpd_milters = [{ socket = \"inet:a:1\", "
                    "command_timeout = \"2d\" }]\n") == "milter.smtpd_milters.command_timeout");
    CHECK(error_key("[milter]\nsmtpd_milters = [1]\n") == "milter.smtpd_milters");
    CHECK(error_key("[milter]\nlistener_milters = { \"127.0.0.9:25\" = [] }\n") ==
          "milter.listener_milters.127.0.0.9:25");
    CHECK(error_key("[milter]\nlistener_milters = [\"inet:a:1\"]\n") == "milter.listener_milters");
    CHECK(error_key("[milter]\nprotocol = 5\n") == "milter.protocol");
    CHECK(error_key("[milter]\nprotocol = 7\n") == "milter.protocol");
    CHECK(error_key("[milter]\ndefault_action = \"discard\"\n") == "milter.default_action");
    CHECK(error_key("[milter]\ncontent_timeout = \"0s\"\n") == "milter.content_timeout");
}
