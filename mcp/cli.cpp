#include "cli.hpp"

#include "channel.hpp"
#include "json.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>


namespace smx {
namespace {

struct CommandRule {
    const char* name;
    int min_operands;
    int max_operands;  // -1: any (QMGR checks them)
};

const CommandRule commands[] = {
    {"run", 0, 0},   {"check-config", 0, 0}, {"stats", 0, 0},
    {"queue", 0, 0}, {"qshape", 0, 1},       {"show", 1, 1},
    {"requeue", 0, 1}, {"flush", 0, -1},     {"hold", 1, -1},
    {"release", 1, -1}, {"delete", 1, -1},   {"help", 0, 0},
    {"version", 0, 0}, {"reload", 0, 0},     {"config", 0, -1},
};

// Which command takes which filter option.
bool takes_filter(const std::string& command, const std::string& option) {
    if (command == "queue" || command == "qshape") return true;
    return command == "requeue" && option == "--domain";
}

const CommandRule* find_command(const std::string& name) {
    for (const auto& c : commands)
        if (name == c.name) return &c;
    return nullptr;
}

// JSON's number grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
bool is_json_number(std::string_view s) {
    auto digits = [&](std::size_t& i) {
        const std::size_t from = i;
        while (i < s.size() && s[i] >= '0' && s[i] <= '9') ++i;
        return i > from;
    };
    std::size_t i = 0;
    if (i < s.size() && s[i] == '-') ++i;
    if (i < s.size() && s[i] == '0') ++i;
    else if (!digits(i)) return false;
    if (i < s.size() && s[i] == '.' && !digits(++i)) return false;
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
        ++i;
        if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
        if (!digits(i)) return false;
    }
    return i == s.size();
}

std::string_view trim(std::string_view s) {
    const auto first = s.find_first_not_of(" \t\r");
    if (first == std::string_view::npos) return {};
    return s.substr(first, s.find_last_not_of(" \t\r") - first + 1);
}

void print_with_newline(std::ostream& out, const std::string& text) {
    out << text;
    if (!text.empty() && text.back() != '\n') out << '\n';
}

} // namespace

std::optional<std::uint64_t> parse_age(std::string_view s) {
    std::uint64_t unit = 1;
    if (!s.empty()) {
        switch (s.back()) {
        case 's': unit = 1; break;
        case 'm': unit = 60; break;
        case 'h': unit = 3600; break;
        case 'd': unit = 86400; break;
        case 'w': unit = 7 * 86400; break;
        default: unit = 0;
        }
        if (unit) s.remove_suffix(1);
        else unit = 1;
    }
    if (s.empty() || s.size() > 12 || s.find_first_not_of("0123456789") != s.npos)
        return std::nullopt;
    const std::uint64_t n = std::stoull(std::string(s)) * unit;
    if (n > 100ull * 366 * 86400) return std::nullopt;
    return n;
}

std::optional<Args> parse_args(int argc, const char* const* argv, std::string& err) {
    Args a;
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") {
            return Args{"help", "", false, {}, {}};
        } else if (arg == "-V" || arg == "--version") {
            return Args{"version", "", false, {}, {}};
        } else if (arg == "-c" || arg == "--config") {
            if (i + 1 >= argc) {
                err = "option " + arg + " needs a file name";
                return std::nullopt;
            }
            a.config_path = argv[++i];
            a.config_given = true;
        } else if (arg.rfind("--config=", 0) == 0) {
            a.config_path = arg.substr(9);
            a.config_given = true;
        } else if (arg == "--json") {
            a.json = true;
        } else if (arg == "-n") {
            a.changed = true;
        } else if (arg == "-d") {
            a.defaults = true;
        } else if (arg == "--domain" || arg == "--sender" || arg == "--older-than") {
            if (i + 1 >= argc) {
                err = "option " + arg + " needs a value";
                return std::nullopt;
            }
            std::string value = argv[++i];
            if (arg == "--older-than") {
                const auto age = parse_age(value);
                if (!age) {
                    err = "--older-than: '" + value + "' is not an age (e.g. 90s, 15m, 1h, 2d)";
                    return std::nullopt;
                }
                value = std::to_string(*age);
            } else if (arg == "--domain" && (value.empty() || value.find('@') != value.npos)) {
                err = "--domain: '" + value + "' is not a domain";
                return std::nullopt;
            }
            a.filters.push_back(arg.substr(2) + "=" + value);
        } else if (arg.size() > 1 && arg[0] == '-') {
            err = "unknown option '" + arg + "'";
            return std::nullopt;
        } else if (a.command.empty()) {
            a.command = arg;
        } else {
            a.operands.push_back(arg);
        }
    }
    if (a.command.empty()) {
        err = "no command given";
        return std::nullopt;
    }
    const CommandRule* rule = find_command(a.command);
    if (!rule) {
        err = "unknown command '" + a.command + "'";
        return std::nullopt;
    }
    const int n = static_cast<int>(a.operands.size());
    if (n < rule->min_operands) {
        err = a.command + " needs a queue id";
        return std::nullopt;
    }
    if (rule->max_operands >= 0 && n > rule->max_operands) {
        err = a.command + " takes no arguments ('" + a.operands.front() + "')";
        return std::nullopt;
    }
    if (a.json && a.command != "stats" && a.command != "queue") {
        err = "--json goes with stats and queue only";
        return std::nullopt;
    }
    if ((a.changed || a.defaults) && a.command != "config") {
        err = std::string(a.changed ? "-n" : "-d") + " goes with config only";
        return std::nullopt;
    }
    if (a.changed && a.defaults) {
        err = "config takes -n or -d, not both";
        return std::nullopt;
    }
    for (const auto& f : a.filters) {
        const std::string option = "--" + f.substr(0, f.find('='));
        if (!takes_filter(a.command, option)) {
            err = option + " does not go with " + a.command;
            return std::nullopt;
        }
    }
    if (a.command == "qshape" && n == 1 && a.operands[0] != "active" &&
        a.operands[0] != "deferred" && a.operands[0] != "all") {
        err = "qshape takes active, deferred or all, not '" + a.operands[0] + "'";
        return std::nullopt;
    }
    if (a.command == "requeue" && (n == 1) == !a.filters.empty()) {
        err = "requeue needs a queue id or --domain D (one of them)";
        return std::nullopt;
    }
    if (a.command == "help" || a.command == "version") a.config_path.clear();
    return a;
}

void print_usage(std::ostream& out) {
    out << "usage: smx COMMAND [-c FILE] [ARGS]\n"
           "\n"
           "commands:\n"
           "  run              start smx-qmgr, smx-smtpc and smx-smtps and supervise them\n"
           "  check-config     load and validate the config, print a summary\n"
           "  config [-n|-d] [KEY...]\n"
           "                   the config as \"section.key = value\" lines: every key,\n"
           "                   -n those not at their default, -d the defaults\n"
           "  reload           have the running smx re-read the config\n"
           "  stats [--json]   QMGR counters as \"name value\" lines, or one JSON object\n"
           "  queue [--json] [FILTER]   list the queue (FILTER: --domain D,\n"
           "                   --sender S, --older-than AGE such as 90s, 15m, 1h, 2d)\n"
           "  qshape [active|deferred|all] [FILTER]\n"
           "                   recipients by domain and age in minutes, like postfix's qshape\n"
           "  show ID          envelope, recipients and header section of one message\n"
           "  requeue ID | --domain D\n"
           "                   make deferred recipients due now\n"
           "  flush            retry deferred mail now\n"
           "  hold ID...       hold queue entries\n"
           "  release ID...    release held entries\n"
           "  delete ID...     delete queue entries\n"
           "\n"
           "options:\n"
           "  -c, --config FILE   TOML config file (default: " << default_config << "\n"
           "                      if it exists, else the built-in defaults: listen\n"
           "                      127.0.0.1:2525, spool ./var/spool; -c '' for those)\n"
           "  -h, --help          this text\n"
           "  -V, --version       print the version\n"
           "\n"
           "exit status: 0 ok, 1 failure, 2 config error, 64 usage error\n";
}

const char* const default_config = SMX_DEFAULT_CONFIG;

void resolve_config(Args& a, const std::string& default_file) {
    if (!a.config_given && ::access(default_file.c_str(), F_OK) == 0) a.config_path = default_file;
    if (!a.config_path.empty()) a.config_source = a.config_path;
    else if (a.config_given) a.config_source = "built-in defaults (-c '')";
    else a.config_source = "built-in defaults (no " + default_file + ")";
}

std::optional<sm::Config> load_checked(const std::string& path, std::ostream& err) {
    try {
        sm::Config cfg = sm::load_config(path);
        if (!cfg.server.user.empty() && !::getpwnam(cfg.server.user.c_str()))
            throw sm::ConfigError("server.user", "no such user '" + cfg.server.user + "'");
        for (auto [key, name] : {std::pair{"server.admin_group", &cfg.server.admin_group},
                                 std::pair{"server.stats_group", &cfg.server.stats_group}})
            if (!name->empty() && !::getgrnam(name->c_str()))
                throw sm::ConfigError(key, "no such group '" + *name + "'");
        return cfg;
    } catch (const std::exception& e) {
        err << "smx: config error: " << e.what() << '\n';
        return std::nullopt;
    }
}

std::string stats_to_json(std::string_view text) {
    std::string out = "{";
    std::string sep = "\n  ";
    while (!text.empty()) {
        const auto nl = text.find('\n');
        const std::string_view line = trim(text.substr(0, nl));
        text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
        if (line.empty()) continue;
        const auto space = line.find_first_of(" \t");
        const std::string_view name = line.substr(0, space);
        const std::string value(
            space == std::string_view::npos ? std::string_view{} : trim(line.substr(space)));
        out += sep + sm::json_string(name) + ": " +
               (is_json_number(value) ? value : sm::json_string(value));
        sep = ",\n  ";
    }
    return out + (out.size() > 1 ? "\n}\n" : "}\n");
}

int ctl_command(const Args& args, std::ostream& out, std::ostream& err) {
    auto cfg = load_checked(args.config_path, err);
    if (!cfg) return exit_config;
    const std::string socket = cfg->qmgr_socket();
    std::string why;
    sm::msg::CtlRequest req{args.command, args.filters};
    if (args.json && args.command == "queue") req.args.push_back("json");
    req.args.insert(req.args.end(), args.operands.begin(), args.operands.end());
    auto reply = sm::ctl_call(socket, req, why);
    if (!reply) {
        err << "smx: cannot reach qmgr at " << socket << " (config: " << args.config_source
            << "): " << why << '\n';
        return exit_failed;
    }
    if (reply->status != 0) {
        err << "smx: " << args.command << ": ";
        print_with_newline(err, reply->text.empty() ? "failed" : reply->text);
        return exit_failed;
    }
    if (args.json && args.command == "stats") out << stats_to_json(reply->text);
    else print_with_newline(out, reply->text);
    return exit_ok;
}

} // namespace smx
