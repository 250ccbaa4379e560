// The smx command line: argument parsing, check-config, stats --json.
#include "mcp/cli.hpp"
#include "mcp/cli_config.hpp"
#include "mcp/queue_commands.hpp"

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace smx::mcp;

namespace {

struct TempConfig {
    explicit TempConfig(const std::string& text) {
        char p[] = "/tmp/smx-mcp-config-XXXXXX";
        const int fd = ::mkstemp(p);
        REQUIRE(fd >= 0);
        ::close(fd);
        path = p;
        std::ofstream(path) << text;
    }
    ~TempConfig() { std::remove(path.c_str()); }
    std::string path;
};

struct Checked {
    int status;
    std::string out, err;
};

Checked check(const std::string& text) {
    TempConfig c(text);
    std::ostringstream out, err;
    const int status = check_config(c.path, out, err);
    return {status, out.str(), err.str()};
}

std::optional<Args> parse(std::vector<const char*> argv, std::string& err) {
    argv.insert(argv.begin(), "smx");
    return parse_args(static_cast<int>(argv.size()), argv.data(), err);
}

} // namespace

TEST_CASE("arguments: command, -c anywhere, operands") {
    std::string err;
    auto a = parse({"stats", "-c", "x.toml", "--json"}, err);
    REQUIRE(a);
    CHECK(a->command == "stats");
    CHECK(a->config_path == "x.toml");
    CHECK(a->json);

    a = parse({"--config=y.toml", "hold", "6740A1B2C3D4E0001", "6740A1B2C3D4E0002"}, err);
    REQUIRE(a);
    CHECK(a->command == "hold");
    CHECK(a->config_path == "y.toml");
    CHECK(a->operands == std::vector<std::string>{"6740A1B2C3D4E0001", "6740A1B2C3D4E0002"});

    CHECK(parse({"--help"}, err)->command == "help");
    CHECK(parse({"run", "-V"}, err)->command == "version");
}

TEST_CASE("arguments: usage errors say what is wrong") {
    std::string err;
    CHECK_FALSE(parse({}, err));
    CHECK(err == "no command given");
    CHECK_FALSE(parse({"frobnicate"}, err));
    CHECK(err == "unknown command 'frobnicate'");
    CHECK_FALSE(parse({"run", "-c"}, err));
    CHECK(err == "option -c needs a file name");
    CHECK_FALSE(parse({"hold"}, err));
    CHECK(err == "hold needs a queue id");
    CHECK_FALSE(parse({"run", "extra"}, err));
    CHECK(err == "run takes no arguments ('extra')");
    CHECK_FALSE(parse({"flush", "--json"}, err));
    CHECK(err == "--json goes with stats and queue only");
    CHECK_FALSE(parse({"run", "--verbose"}, err));
    CHECK(err == "unknown option '--verbose'");
}

TEST_CASE("without -c: the installed config when it exists, else the built-in defaults") {
    std::string err;
    TempConfig installed("[server]\nlisten = [\"127.0.0.1:2599\"]\n");
    auto a = parse({"check-config"}, err);
    REQUIRE(a);
    CHECK_FALSE(a->config_given);
    resolve_config(*a, installed.path);
    CHECK(a->config_path == installed.path);
    CHECK(a->config_source == installed.path);
    std::ostringstream out, cerr;
    CHECK(check_config(a->config_path, out, cerr, a->config_source) == exit_ok);
    CHECK(out.str().rfind("config OK (" + installed.path + ")\nlisten: 127.0.0.1:2599\n", 0) == 0);

    a = parse({"check-config"}, err);
    resolve_config(*a, "/nonexistent/smx.toml");
    CHECK(a->config_path.empty());
    CHECK(a->config_source == "built-in defaults (no /nonexistent/smx.toml)");
    out.str("");
    CHECK(check_config(a->config_path, out, cerr, a->config_source) == exit_ok);
    CHECK(out.str().rfind("config OK (built-in defaults (no /nonexistent/smx.toml))\n", 0) == 0);

    // -c wins, and -c '' asks for the built-in defaults whatever is installed.
    a = parse({"stats", "-c", "x.toml"}, err);
    resolve_config(*a, installed.path);
    CHECK(a->config_path == "x.toml");
    CHECK(a->config_source == "x.toml");
    a = parse({"run", "-c", ""}, err);
    resolve_config(*a, installed.path);
    CHECK(a->config_path.empty());
    CHECK(a->config_source == "built-in defaults (-c '')");
    // The compiled-in default is meson's sysconfdir, /etc with prefix /usr.
    CHECK(std::string(default_config).ends_with("/smx/smx.toml"));
}

TEST_CASE("arguments: queue filters and the queue tools") {
    std::string err;
    auto a = parse({"queue", "--json", "--domain", "Example.NET", "--older-than", "2d",
                    "--sender", "<>"}, err);
    REQUIRE(a);
    CHECK(a->json);
    CHECK(a->filters == std::vector<std::string>{"domain=Example.NET", "older-than=172800",
                                                 "sender=<>"});
    a = parse({"qshape", "deferred", "--older-than", "90"}, err);
    REQUIRE(a);
    CHECK(a->operands == std::vector<std::string>{"deferred"});
    CHECK(a->filters == std::vector<std::string>{"older-than=90"});
    CHECK(parse({"requeue", "--domain", "example.net"}, err));
    CHECK(parse({"requeue", "6B035578AF0E70000"}, err));
    CHECK(parse({"show", "6B035578AF0E70000"}, err));

    CHECK_FALSE(parse({"queue", "--older-than", "1y"}, err));
    CHECK(err == "--older-than: '1y' is not an age (e.g. 90s, 15m, 1h, 2d)");
    CHECK_FALSE(parse({"queue", "--domain"}, err));
    CHECK(err == "option --domain needs a value");
    CHECK_FALSE(parse({"queue", "--domain", "a@b"}, err));
    CHECK(err == "--domain: 'a@b' is not a domain");
    CHECK_FALSE(parse({"qshape", "incoming"}, err));
    CHECK(err == "qshape takes active, deferred or all, not 'incoming'");
    CHECK_FALSE(parse({"show"}, err));
    CHECK(err == "show needs a queue id");
    CHECK_FALSE(parse({"requeue"}, err));
    CHECK(err == "requeue needs a queue id or --domain D (one of them)");
    CHECK_FALSE(parse({"requeue", "6B035578AF0E70000", "--domain", "x"}, err));
    CHECK_FALSE(parse({"requeue", "--sender", "a@b"}, err));
    CHECK(err == "--sender does not go with requeue");
    CHECK_FALSE(parse({"hold", "X", "--domain", "x"}, err));
    CHECK(err == "--domain does not go with hold");
}

TEST_CASE("arguments: hold, release and delete take ids, -, ALL [QUEUE]; flush a domain") {
    std::string err;
    const char* id = "6B035578AF0E70000";
    auto a = parse({"delete", id, "-", "6B035578AF0E70001"}, err);
    REQUIRE(a);
    CHECK(a->operands == std::vector<std::string>{id, "-", "6B035578AF0E70001"});
    CHECK(parse({"hold", "ALL"}, err));
    CHECK(parse({"release", "ALL", "hold"}, err));
    CHECK(parse({"delete", "ALL", "deferred"}, err));
    CHECK(parse({"delete", "ALL", "active"}, err));
    CHECK(parse({"flush", "example.net"}, err));
    CHECK(parse({"show", "--body", id}, err)->body);

    CHECK_FALSE(parse({"delete", "ALL", "incoming"}, err));
    CHECK(err == "delete: 'incoming' is not a queue (active, deferred or hold)");
    CHECK_FALSE(parse({"delete", "ALL", "hold", id}, err));
    CHECK(err == "delete: ALL takes at most a queue name, not '" + std::string(id) + "'");
    CHECK_FALSE(parse({"hold", id, "ALL"}, err));
    CHECK(err == "hold: 'ALL' is not a queue id");
    CHECK_FALSE(parse({"hold", "-", "-"}, err));
    CHECK(err == "hold: - (standard input) given twice");
    CHECK_FALSE(parse({"release", "6B035578AF0E7000"}, err));
    CHECK(err == "release: '6B035578AF0E7000' is not a queue id");
    CHECK_FALSE(parse({"flush", "a@example.net"}, err));
    CHECK(err == "flush: 'a@example.net' is not a domain");
    CHECK_FALSE(parse({"flush", "a.example", "b.example"}, err));
    CHECK(err == "flush takes one argument, not 'b.example'");
    CHECK_FALSE(parse({"queue", "--body"}, err));
    CHECK(err == "--body goes with show only");
}

TEST_CASE("help: every command, smx help COMMAND and COMMAND --help") {
    std::string err;
    auto a = parse({"help", "queue"}, err);
    REQUIRE(a);
    CHECK(a->command == "help");
    CHECK(a->operands == std::vector<std::string>{"queue"});
    a = parse({"delete", "--help"}, err);
    CHECK(a->command == "help");
    CHECK(a->operands == std::vector<std::string>{"delete"});
    CHECK(parse({"--help"}, err)->operands.empty());
    CHECK_FALSE(parse({"help", "mailq"}, err));
    CHECK(err == "help: unknown command 'mailq'");

    std::ostringstream usage;
    print_usage(usage);
    for (const char* c : {"run", "check-config", "reload", "stats", "queue", "qshape", "show",
                          "requeue", "flush", "hold", "release", "delete", "help", "version"}) {
        CHECK(usage.str().find(std::string("\n  ") + c + " ") != std::string::npos);
        std::ostringstream help;
        print_help(help, c);
        CHECK(help.str().rfind(std::string("usage: smx ") + c, 0) == 0);
    }
    std::ostringstream help;
    print_help(help, "delete");
    CHECK(help.str().find("usage: smx delete ID... | - | ALL [QUEUE] [-c FILE]\n\n"
                          "delete queue entries, without a bounce (postsuper -d).\n\n") == 0);
    CHECK(help.str().find("ALL QUEUE: those") != std::string::npos);
}

TEST_CASE("ids on standard input: one a line, postfix's marks off, bad lines skipped") {
    std::istringstream in("6B035578AF0E70000\n  6B035578AF0E70001*  \n\n6B035578AF0E70002!\n"
                          "not-an-id\n" + std::string(100000, 'A') + "\n6B035578AF0E70003");
    std::ostringstream warn;
    IdReader ids(in, "delete", warn);
    std::vector<std::string> got;
    while (auto id = ids.next()) got.push_back(*id);
    CHECK(got == std::vector<std::string>{"6B035578AF0E70000", "6B035578AF0E70001",
                                          "6B035578AF0E70002", "6B035578AF0E70003"});
    CHECK(ids.skipped());
    CHECK(warn.str() == "smx: delete: line 5: 'not-an-id' is not a queue id; skipped\n"
                        "smx: delete: line 6: 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA...' is "
                        "not a queue id; skipped\n");
    std::istringstream empty("");
    IdReader none(empty, "hold", warn);
    CHECK_FALSE(none.next());
    CHECK_FALSE(none.skipped());
}

TEST_CASE("show --body: CRLF to LF across pages") {
    bool cr = false;
    CHECK(to_lf("a\r\nb\r", cr) == "a\nb");
    CHECK(cr);
    CHECK(to_lf("\nc\rd\r", cr) == "\nc\rd");
    CHECK(to_lf("e", cr) == "\re");
    CHECK_FALSE(cr);
}

TEST_CASE("ages: units, limits") {
    CHECK(parse_age("90") == 90u);
    CHECK(parse_age("15m") == 900u);
    CHECK(parse_age("1h") == 3600u);
    CHECK(parse_age("2d") == 172800u);
    CHECK(parse_age("1w") == 604800u);
    CHECK_FALSE(parse_age(""));
    CHECK_FALSE(parse_age("h"));
    CHECK_FALSE(parse_age("-1h"));
    CHECK_FALSE(parse_age("1.5h"));
    CHECK_FALSE(parse_age("999999999999999d"));
    CHECK_FALSE(parse_age("36600000d"));
}

TEST_CASE("check-config: a good config prints a summary, exit 0") {
    // Directories smx run could make, as whoever runs the test.
    const std::string top = std::filesystem::temp_directory_path().string();
    auto r = check(R"(
[server]
listen = ["127.0.0.1:2526", "[::1]:2526"]
[queue]
spool_dir = ")" + top + R"(/smx-test/spool"
run_dir = ")" + top + R"(/smx-test/run"
[routes]
default = "[127.0.0.1]:2600"
"example.net" = ["[10.0.0.1]:25", "[10.0.0.2]:25"]
)");
    CHECK(r.status == exit_ok);
    CHECK(r.err.empty());
    CHECK(r.out.rfind("config OK (", 0) == 0);
    CHECK(r.out.find("listen: 127.0.0.1:2526, [::1]:2526\n") != std::string::npos);
    CHECK(r.out.find("spool:  " + top + "/smx-test/spool (cdb hashed)\n") != std::string::npos);
    CHECK(r.out.find("cdb:    " + top + "/smx-test/spool/cdb\n") != std::string::npos);
    CHECK(r.out.find("ibdb:   " + top + "/smx-test/spool/ibdb\n") != std::string::npos);
    CHECK(r.out.find("run:    " + top + "/smx-test/run\n") != std::string::npos);
    CHECK(r.out.find("routes: example.net = [10.0.0.1]:25 [10.0.0.2]:25, "
                     "default = [127.0.0.1]:2600\n") != std::string::npos);
}

TEST_CASE("check-config: built-in defaults are valid") {
    std::ostringstream out, err;
    CHECK(check_config("", out, err) == exit_ok);
    CHECK(out.str().find("config OK (built-in defaults)") == 0);
    CHECK(out.str().find("listen: [127.0.0.1]:2525") != std::string::npos);
}

TEST_CASE("check-config: errors name the key, exit 2") {
    struct Case {
        const char* text;
        const char* message;
    } cases[] = {
        {"[server]\nlisten_on = \"127.0.0.1:25\"\n", "smx: config error: server.listen_on: unknown key\n"},
        {"[server]\nlisten = [\"127.0.0.1:70000\"]\n",
         "smx: config error: server.listen: port out of range in '127.0.0.1:70000'\n"},
        {"[server]\nlisten = [\"127.0.0.1:smtp\"]\n",
         "smx: config error: server.listen: bad port in '127.0.0.1:smtp'\n"},
        {"[server]\nrelay_networks = [\"10.0.0.0/33\"]\n",
         "smx: config error: server.relay_networks: bad prefix length in '10.0.0.0/33'\n"},
        {"[server]\nrelay_networks = [\"10.0.0.300/8\"]\n",
         "smx: config error: server.relay_networks: bad address in '10.0.0.300/8'\n"},
        {"[queue]\ncommit_max_batch = \"many\"\n",
         "smx: config error: queue.commit_max_batch: wrong type\n"},
        {"[server]\nuser = \"no-such-user-smx\"\n",
         "smx: config error: server.user: no such user 'no-such-user-smx'\n"},
        {"[server]\nadmin_group = \"no-such-group-smx\"\n",
         "smx: config error: server.admin_group: no such group 'no-such-group-smx'\n"},
        {"[server]\nstats_group = \"no-such-group-smx\"\n",
         "smx: config error: server.stats_group: no such group 'no-such-group-smx'\n"},
        {"[server]\ngroup = \"\"\n", "smx: config error: server.group: must not be empty\n"},
        {"[qeue]\n", "smx: config error: qeue: unknown section\n"},
        // The stores each need a directory of their own.
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/d\"\nibdb_dir = \"/d/\"\n",
         "smx: config error: queue.ibdb_dir: \"/d\" is the same directory as queue.content_dir "
         "(/d): each store needs a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/d\"\nibdb_dir = \"/d/log\"\n",
         "smx: config error: queue.ibdb_dir: \"/d/log\" lies inside queue.content_dir (/d): each "
         "store needs a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/d/cdb\"\nibdb_dir = \"/d\"\n",
         "smx: config error: queue.ibdb_dir: \"/d\" holds queue.content_dir (/d/cdb): each store "
         "needs a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/s/ibdb\"\n",
         "smx: config error: queue.content_dir: \"/s/ibdb\" is the same directory as "
         "queue.ibdb_dir (/s/ibdb): each store needs a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\nibdb_dir = \"/s/quarantine\"\n",
         "smx: config error: queue.ibdb_dir: \"/s/quarantine\" is the same directory as the "
         "quarantine (/s/quarantine): each store needs a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/s/\"\n",
         "smx: config error: queue.content_dir: \"/s\" is or holds queue.spool_dir (/s): give it "
         "a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s/spool\"\nibdb_dir = \"/s\"\n",
         "smx: config error: queue.ibdb_dir: \"/s\" is or holds queue.spool_dir (/s/spool): give "
         "it a directory of its own\n"},
        {"[queue]\nspool_dir = \"/s\"\ncontent_dir = \"/s/a/cdb\"\n",
         "smx: config error: queue.content_dir: \"/s/a/cdb\" is inside queue.spool_dir but not "
         "directly in it: use /s/<name> or a directory outside\n"},
    };
    for (const auto& c : cases) {
        INFO(c.text);
        auto r = check(c.text);
        CHECK(r.status == exit_config);
        CHECK(r.out.empty());
        CHECK(r.err == c.message);
    }
}

TEST_CASE("check-config: TOML syntax errors and missing files, exit 2") {
    auto r = check("[server\n");
    CHECK(r.status == exit_config);
    CHECK(r.err.rfind("smx: config error: ", 0) == 0);
    CHECK(r.err.find("line 1") != std::string::npos);

    std::ostringstream out, err;
    CHECK(check_config("/nonexistent/smx.toml", out, err) == exit_config);
    CHECK(err.str().rfind("smx: config error: /nonexistent/smx.toml: ", 0) == 0);
}

TEST_CASE("the example config loads and matches the built-in defaults") {
    std::ostringstream out, err;
    CHECK(check_config(EXAMPLE_CONFIG, out, err) == exit_ok);
    CHECK(err.str().empty());
    const auto ex = load_checked(EXAMPLE_CONFIG, err);
    const auto def = load_checked("", err);
    REQUIRE(ex);
    REQUIRE(def);
    CHECK(ex->server.listen[0].host == def->server.listen[0].host);
    CHECK(ex->server.listen[0].port == def->server.listen[0].port);
    CHECK(ex->server.max_message_size == def->server.max_message_size);
    CHECK(ex->server.relay_networks.size() == def->server.relay_networks.size());
    CHECK(ex->queue.spool_dir == def->queue.spool_dir);
    CHECK(ex->queue.commit_interval == def->queue.commit_interval);
    CHECK(ex->queue.commit_max_batch == def->queue.commit_max_batch);
    CHECK(ex->queue.retry_max == def->queue.retry_max);
    CHECK(ex->client.max_concurrency == def->client.max_concurrency);
    CHECK(ex->log.level == def->log.level);
    CHECK(ex->client.smtp_port == def->client.smtp_port);
    CHECK(ex->client.dns_servers == def->client.dns_servers);
    // No routes in either: every domain by its MX.
    REQUIRE(ex->default_route);
    REQUIRE(def->default_route);
    CHECK(ex->default_route->mx);
    CHECK(def->default_route->mx);
}

TEST_CASE("check-config: what smx run would refuse on this machine, exit 2") {
    TempConfig file("");
    char dir[] = "/tmp/smx-mcp-paths-XXXXXX";
    REQUIRE(::mkdtemp(dir));
    const std::string d = dir;
    std::filesystem::create_symlink(file.path, d + "/link.log");
    struct Case {
        std::string text, message;
    } cases[] = {
        {"[log]\nfile = \"" + d + "/missing/smx.log\"\n",
         "log.file: the directory of " + d + "/missing/smx.log, " + d +
             "/missing, does not exist"},
        {"[log]\nfile = \"" + d + "/link.log\"\n",
         "log.file: " + d + "/link.log is a symbolic link; smx refuses to use it"},
        {"[log]\nfile = \"" + d + "\"\n", "log.file: " + d + " is not a regular file"},
        {"[queue]\nspool_dir = \"" + file.path + "/spool\"\n",
         "queue.spool_dir: " + file.path + " is not a directory"},
        {"[queue]\nrun_dir = \"" + file.path + "/a/run\"\n",
         "queue.run_dir: " + file.path + " is not a directory"},
        {"[queue]\nspool_dir = \"" + d + "/s\"\nibdb_dir = \"" + file.path + "/ibdb\"\n",
         "queue.ibdb_dir: " + file.path + " is not a directory"},
    };
    for (const auto& c : cases) {
        INFO(c.text);
        auto r = check(c.text);
        CHECK(r.status == exit_config);
        CHECK(r.err == "smx: config error: " + c.message + "\n");
    }
    // A log file that is there, or can be made, is fine.
    CHECK(check("[queue]\nspool_dir = \"" + d + "/s\"\n[log]\nfile = \"" + d + "/new.log\"\n")
              .status == exit_ok);
    std::filesystem::remove_all(d);
}

TEST_CASE("check-config: an open relay, host bits, names that are no domains are warnings, "
          "exit 0") {
    const std::string w = "smx: warning: ";
    auto warned = [](const std::string& text) {
        auto r = check(text);
        CHECK(r.status == exit_ok);
        return r.err;
    };
    auto networks = [&](const std::string& list) {
        return warned("[server]\nrelay_networks = [" + list + "]\n");
    };
    CHECK(networks(R"("0.0.0.0/0")") ==
          w + "server.relay_networks: \"0.0.0.0/0\" is every IPv4 address: anyone on the "
              "Internet may relay through smx to any domain (an open relay)\n");
    CHECK(networks(R"("::/0")") ==
          w + "server.relay_networks: \"::/0\" is every IPv6 address: anyone on the Internet "
              "may relay through smx to any domain (an open relay)\n");
    CHECK(networks(R"("10.0.0.0/7")") ==
          w + "server.relay_networks: \"10.0.0.0/7\" is 1/128 of all IPv4 addresses (shorter "
              "than /8): every client in it may relay through smx to any domain, close to an "
              "open relay; list only your own networks\n");
    CHECK(networks(R"("2000::/3")").find(
              "\"2000::/3\" is 1/8 of all IPv6 addresses (shorter than /16)") != std::string::npos);
    // A v4-mapped network is the IPv4 one (clients of a dual-stack listener).
    CHECK(networks(R"("::ffff:0.0.0.0/96")").find("is every IPv4 address") != std::string::npos);
    CHECK(networks(R"("10.0.0.1/8")") ==
          w + "server.relay_networks: \"10.0.0.1/8\" has host bits set: it means 10.0.0.0/8, "
              "every address of which may relay; write \"10.0.0.0/8\", or \"10.0.0.1/32\" for "
              "the one host\n");
    CHECK(networks(R"("2001:db8::1/64")").find("it means 2001:db8::/64") != std::string::npos);
    CHECK(networks(R"("10.0.0.0/8", "192.0.2.1", "192.0.2.128/25", "2001:db8::/32", "::1/128")") ==
          "");

    CHECK(warned("[server]\nrelay_domains = [\"*.example.com\", \"exa mple.org\", \"example.net\", "
                 "\".example.org\", \"[192.0.2.1]\", \"xn--bcher-kva.example\", \"a-b.example\"]\n") ==
          w + "server.relay_domains: \"*.example.com\" is not a domain name, so no mail matches "
              "it (\".example.com\" matches every subdomain of example.com)\n" +
              w + "server.relay_domains: \"exa mple.org\" is not a domain name, so no mail matches "
              "it\n");
    for (const char* bad : {"-a.example", "a-.example", "a..example", "example.", "."}) {
        INFO(bad);
        CHECK(warned(std::string("[server]\nrelay_domains = [\"") + bad + "\"]\n") ==
              w + "server.relay_domains: \"" + bad + "\" is not a domain name, so no mail matches it\n");
    }
    CHECK(warned("[routes]\n\"bad domain\" = \"x y:25\"\n\"example.net\" = [\"[10.0.0.1]:25\", "
                 "\"relay.example:587\", \"[relay2.example]\"]\ndefault = \"[not an ip]\"\n") ==
          w + "routes.\"bad domain\": \"bad domain\" is not a domain name, so no mail matches it\n" +
              w + "routes.\"bad domain\": \"x y\" is neither a host name nor an address\n" +
              w + "routes.default: \"not an ip\" is neither a host name nor an address\n");
    CHECK(warned("[tls_policy]\n\"*.example.net\" = \"encrypt\"\n\"example.org\" = \"none\"\n")
              .find("tls_policy.\"*.example.net\": \"*.example.net\" is not a domain name") !=
          std::string::npos);
}

namespace {
struct Printed {
    int status;
    std::string out, err;
};

Printed config(const std::string& path, std::vector<std::string> keys = {}, bool changed = false,
               bool defaults = false) {
    Args a;
    a.command = "config";
    a.config_path = path;
    a.operands = std::move(keys);
    a.changed = changed;
    a.defaults = defaults;
    std::ostringstream out, err;
    const int status = config_command(a, out, err);
    return {status, out.str(), err.str()};
}
} // namespace

TEST_CASE("config: every key, -n what differs from the defaults, -d the defaults") {
    TempConfig c(R"([server]
hostname = "mx.example.org"
max_errors = 10
relay_domains = ["Example.NET"]
[queue]
retry_min = 60
[routes]
"example.net" = ["[10.0.0.1]:25", "relay.example:587"]
".example.com" = "mx"
[tls_policy]
"example.net" = "verify"
)");
    // Printed in the table's order, then [routes] and [tls_policy].
    const auto all = config(c.path);
    CHECK(all.status == exit_ok);
    CHECK(all.out.starts_with("server.listen = [\"127.0.0.1:2525\"]\n"
                              "server.hostname = \"mx.example.org\"\n"));
    CHECK(all.out.find("\nserver.max_errors = 10\n") != std::string::npos);
    CHECK(all.out.find("\nclient.helo_name = \"mx.example.org\"\n") != std::string::npos);
    CHECK(all.out.find("\nlog.syslog_facility = \"mail\"\n") != std::string::npos);
    const std::string tables = "routes.\".example.com\" = \"mx\"\n"
                               "routes.\"example.net\" = [\"[10.0.0.1]:25\", \"relay.example:587\"]\n"
                               "tls_policy.\"example.net\" = \"verify\"\n";
    // [rewrite] is the last section; local_domains follows hostname.
    CHECK(all.out.ends_with("rewrite.local_domains = [\"mx.example.org\"]\n" + tables));
    // max_errors is at its default, helo_name follows hostname: neither shows.
    CHECK(config(c.path, {}, true).out == "server.hostname = \"mx.example.org\"\n"
                                          "server.relay_domains = [\"example.net\"]\n"
                                          "queue.retry_min = 60\n" + tables);
    CHECK(config("", {}, true).out == "");
    // The output is a config file: read back, it prints the same.
    TempConfig again(all.out);
    CHECK(config(again.path).out == all.out);
    TempConfig changed(config(c.path, {}, true).out);
    CHECK(config(changed.path).out == all.out);

    const auto d = config(c.path, {}, false, true);
    CHECK(d.out == config("").out);
    CHECK(d.out.find("\nqueue.retry_min = 300\n") != std::string::npos);
    CHECK(d.out.find("\nstats.listen = \"\"\n") != std::string::npos);
    CHECK(d.out.ends_with("\"]\nroutes.default = \"mx\"\n"));
    CHECK(d.out.find("\nrewrite.local_domains = [\"") != std::string::npos);
}

TEST_CASE("config KEY...: those keys in that order; an unknown one is an error, exit 1") {
    TempConfig c("[queue]\nretry_min = 60\n[routes]\n\"example.net\" = \"mx\"\n");
    CHECK(config(c.path, {"queue.retry_min", "server.listen", "routes.example.net"}).out ==
          "queue.retry_min = 60\nserver.listen = [\"127.0.0.1:2525\"]\n"
          "routes.\"example.net\" = \"mx\"\n");
    CHECK(config(c.path, {"routes.\"example.net\""}).out == "routes.\"example.net\" = \"mx\"\n");
    // -n: only those that differ.
    CHECK(config(c.path, {"server.listen", "queue.retry_min"}, true).out == "queue.retry_min = 60\n");
    CHECK(config(c.path, {"queue.retry_min"}, false, true).out == "queue.retry_min = 300\n");
    for (const char* key : {"queue.retry", "retry_min", "routes.example.org", "server"}) {
        INFO(key);
        const auto r = config(c.path, {"queue.retry_min", key});
        CHECK(r.status == exit_failed);
        CHECK(r.out.empty());
        CHECK(r.err.rfind(std::string("smx: config: unknown key '") + key + "'", 0) == 0);
    }
    const auto bad = config(c.path + ".missing");
    CHECK(bad.status == exit_config);
    CHECK(bad.err.rfind("smx: config error: ", 0) == 0);
}

TEST_CASE("arguments: config -n and -d") {
    std::string err;
    auto a = parse({"config", "-n", "queue.retry_min", "server.listen"}, err);
    REQUIRE(a);
    CHECK(a->changed);
    CHECK_FALSE(a->defaults);
    CHECK(a->operands == std::vector<std::string>{"queue.retry_min", "server.listen"});
    CHECK(parse({"config", "-d"}, err)->defaults);
    CHECK_FALSE(parse({"config", "-n", "-d"}, err));
    CHECK(err == "config takes -n or -d, not both");
    CHECK_FALSE(parse({"queue", "-n"}, err));
    CHECK(err == "-n goes with config only");
}

TEST_CASE("stats --json: numbers stay numbers, the rest are strings") {
    CHECK(stats_to_json("received 12\nibdb_commits 3\nfsync_latency_avg_ms 0.25\n"
                        "state running\n\nqueue_size  2 \n") ==
          "{\n"
          "  \"received\": 12,\n"
          "  \"ibdb_commits\": 3,\n"
          "  \"fsync_latency_avg_ms\": 0.25,\n"
          "  \"state\": \"running\",\n"
          "  \"queue_size\": 2\n"
          "}\n");
    CHECK(stats_to_json("") == "{}\n");
    for (const char* n : {"0", "-0.5", "1e+5", "12.5E-3"})
        CHECK(stats_to_json(std::string("x ") + n) == std::string("{\n  \"x\": ") + n + "\n}\n");
    for (const char* s : {"1.", ".5", "-", "01", "1e", "+1", "0x10", "1 2"})
        CHECK(stats_to_json(std::string("x ") + s) == std::string("{\n  \"x\": \"") + s + "\"\n}\n");
    CHECK(stats_to_json("odd 007\nlast_error \"x\"\\y\nneg -1e3\nempty") ==
          "{\n"
          "  \"odd\": \"007\",\n"
          "  \"last_error\": \"\\\"x\\\"\\\\y\",\n"
          "  \"neg\": -1e3,\n"
          "  \"empty\": \"\"\n"
          "}\n");
}
