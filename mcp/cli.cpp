#include "mcp/cli.hpp"

#include "libsm/ids.hpp"
#include "libsm/json.hpp"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <algorithm>


namespace smx::mcp {
namespace {

struct CommandRule {
    const char* name;
    int min_operands;
    int max_operands;      // -1: any
    const char* synopsis;  // what follows the name
    const char* summary;   // `smx --help`; `smx help NAME` prints details after it
    const char* details = "";
};

constexpr const char* ids_details =
    "ID...: queue ids as smx queue lists them. -: the ids on standard input, one\n"
    "a line (a * or ! after an id, postfix's marks, is ignored; a line that is not\n"
    "an id is skipped with a warning), as postsuper -d - reads them. ALL: every\n"
    "message (hold: those not held; release: the held ones); ALL QUEUE: those\n"
    "with a recipient in QUEUE: active (in memory), deferred or hold.\n"
    "Prints a line per id, or the totals for ALL. Exit status 1 when an id is\n"
    "not in the queue (the others are done; that report goes to standard error).\n"
    "Needs root or server.admin_group.\n";

const CommandRule commands[] = {
    {"run", 0, 0, "", "start smx-qmgr, smx-smtpc and smx-smtps and supervise them",
     "In the foreground, until SIGTERM or Ctrl-C (it stops within 5 s). Started\n"
     "as root, the children run as server.smtps_user, qmgr_user and smtpc_user.\n"
     "Its pid is in RUN_DIR/smx.pid.\n"},
    {"check-config", 0, 0, "", "load and validate the config, print a summary",
     "Exit status 2 naming the bad key: what smx run would refuse.\n"},
    {"config", 0, -1, "[-n|-d] [KEY...]",
     "the config as \"section.key = value\" lines: every key,\n"
     "-n those not at their default, -d the defaults",
     "As postconf, postconf -n and postconf -d: TOML that smx reads back. KEY:\n"
     "section.key, printed in the order given; an unknown one is exit status 1.\n"},
    {"reload", 0, 0, "", "have the running smx re-read the config",
     "Signals the smx run whose pid is in RUN_DIR/smx.pid and prints its answer\n"
     "(the keys that need a restart, if any), within 10 s. Exit status 2: the\n"
     "file was refused and nothing changed.\n"},
    {"stats", 0, 0, "[--json]", "QMGR counters as \"name value\" lines, or one JSON object"},
    {"queue", 0, 0, "[--json] [FILTER]",
     "list the queue like mailq, or one JSON object a line like\n"
     "postqueue -j (FILTER: --domain D, --sender S, --older-than AGE)",
     "--domain D: recipients in domain D; --sender S: messages from S ('<>': the\n"
     "null sender); --older-than AGE: messages older than AGE (90, 90s, 15m, 1h,\n"
     "2d, 1w). --json fields: queue_name, queue_id, arrival_time, message_size,\n"
     "forced_expire, sender, recipients (address, delay_reason; and ours: state,\n"
     "attempts, next_try).\n"},
    {"qshape", 0, 1, "[active|deferred|all] [FILTER]",
     "recipients by domain and age in minutes, like postfix's qshape"},
    {"show", 1, 1, "[--body] ID",
     "envelope, recipients and header section of one message\n"
     "(--body: the whole message, headers and body)",
     "Like postcat -h (postcat -bh with --body). Needs root or server.admin_group.\n"},
    {"requeue", 0, 1, "ID | --domain D", "make deferred recipients due now",
     "Those of message ID, or those in domain D; held ones stay held.\n"},
    {"flush", 0, 1, "[DOMAIN]",
     "retry deferred mail now: all of it (postqueue -f), or\n"
     "the recipients in DOMAIN (postqueue -s)",
     "Held recipients stay held. flush DOMAIN is requeue --domain DOMAIN.\n"},
    {"hold", 1, -1, "ID... | - | ALL [QUEUE]", "hold queue entries (postsuper -h)", ids_details},
    {"release", 1, -1, "ID... | - | ALL [QUEUE]", "release held entries (postsuper -H)",
     ids_details},
    {"delete", 1, -1, "ID... | - | ALL [QUEUE]",
     "delete queue entries, without a bounce (postsuper -d)", ids_details},
    {"map", 0, -1, "build|query|dump ...",
     "lookup tables, as postmap: build FILE.db from FILE,\n"
     "look a key up, list the entries",
     "smx map build [-t hash|btree] [-a] FILE...\n"
     "    compiles the text table FILE (\"key value\" lines, postmap's syntax; -a:\n"
     "    aliases(5) \"name: value\" lines) into FILE.db, a Berkeley DB hash\n"
     "    (default) or btree file: written beside it, synced and renamed over\n"
     "    FILE.db, so smx reads the old table or the new one. Keys are folded to\n"
     "    lower case; a key given twice keeps its first value (a warning names both\n"
     "    lines). FILE may be given as hash:FILE or btree:FILE.\n"
     "smx map query [-t TYPE] FILE KEY\n"
     "    prints KEY's value: exit status 0 found, 1 not found, 2 error. KEY -:\n"
     "    the keys on standard input, one a line, \"key<TAB>value\" printed for\n"
     "    each found (0 when one was). FILE: as for build, or texthash:FILE,\n"
     "    inline:{k=v, ...}.\n"
     "smx map dump [-t TYPE] FILE\n"
     "    every entry as \"key<TAB>value\", in the table's order (postmap -s).\n"
     "A running smx uses a rebuilt table within a second. docs/tables.md.\n"},
    {"help", 0, 1, "[COMMAND]", "this text, or what COMMAND does"},
    {"version", 0, 0, "", "print the version"},
};

bool is_queue_name(const std::string& s) {
    return s == "active" || s == "deferred" || s == "hold";
}

bool is_domain(const std::string& s) { return !s.empty() && s.find('@') == s.npos; }

// The operands of hold, release and delete: ID..., with at most one -, or
// ALL [QUEUE]. Empty when they are valid, else what is wrong.
std::string check_id_operands(const std::vector<std::string>& ops) {
    if (ops[0] == "ALL") {
        if (ops.size() > 2) return "ALL takes at most a queue name, not '" + ops[2] + "'";
        if (ops.size() == 2 && !is_queue_name(ops[1]))
            return "'" + ops[1] + "' is not a queue (active, deferred or hold)";
        return {};
    }
    if (std::count(ops.begin(), ops.end(), "-") > 1) return "- (standard input) given twice";
    for (const auto& op : ops)
        if (op != "-" && !smx::valid_ta_id(op)) return "'" + op + "' is not a queue id";
    return {};
}

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
        // map has options of its own (map_command.hpp): its words as given.
        if (a.command == "map" && arg != "-h" && arg != "--help") {
            a.operands.push_back(arg);
            continue;
        }
        if (arg == "-h" || arg == "--help") {
            // `smx queue --help`: the help of that command.
            Args help;
            help.command = "help";
            if (find_command(a.command)) help.operands.push_back(a.command);
            return help;
        } else if (arg == "-V" || arg == "--version") {
            Args version;
            version.command = "version";
            return version;
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
        } else if (arg == "--body") {
            a.body = true;
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
            } else if (arg == "--domain" && !is_domain(value)) {
                err = "--domain: '" + value + "' is not a domain";
                return std::nullopt;
            }
            a.filters.push_back(arg.substr(2) + "=" + value);
        } else if (arg.size() > 1 && arg[0] == '-') {  // "-" alone: ids on stdin
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
        const std::string& extra = a.operands[static_cast<std::size_t>(rule->max_operands)];
        err = a.command + (rule->max_operands == 0 ? " takes no arguments ('" + extra + "')"
                                                   : " takes one argument, not '" + extra + "'");
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
    if (a.body && a.command != "show") {
        err = "--body goes with show only";
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
    if (a.command == "flush" && n == 1 && !is_domain(a.operands[0])) {
        err = "flush: '" + a.operands[0] + "' is not a domain";
        return std::nullopt;
    }
    if (a.command == "help" && n == 1 && !find_command(a.operands[0])) {
        err = "help: unknown command '" + a.operands[0] + "'";
        return std::nullopt;
    }
    if (a.command == "hold" || a.command == "release" || a.command == "delete") {
        err = check_id_operands(a.operands);
        if (!err.empty()) {
            err = a.command + ": " + err;
            return std::nullopt;
        }
    }
    if (a.command == "help" || a.command == "version" || a.command == "map") a.config_path.clear();
    return a;
}

void print_usage(std::ostream& out) {
    out << "usage: smx COMMAND [-c FILE] [ARGS]\n"
           "\n"
           "commands:\n";
    constexpr std::size_t column = 19;
    for (const auto& c : commands) {
        std::string head = std::string("  ") + c.name + (*c.synopsis ? " " : "") + c.synopsis;
        head += head.size() + 2 > column ? "\n" + std::string(column, ' ')
                                         : std::string(column - head.size(), ' ');
        std::string_view summary = c.summary;
        for (auto nl = summary.find('\n'); nl != summary.npos; nl = summary.find('\n')) {
            out << head << summary.substr(0, nl) << '\n';
            head = std::string(column, ' ');
            summary.remove_prefix(nl + 1);
        }
        out << head << summary << '\n';
    }
    out << "\n"
           "options:\n"
           "  -c, --config FILE   TOML config file (default: " << default_config << "\n"
           "                      if it exists, else the built-in defaults: listen\n"
           "                      127.0.0.1:2525, spool ./var/spool; -c '' for those)\n"
           "  -h, --help          this text (after a command: that command's help)\n"
           "  -V, --version       print the version\n"
           "\n"
           "smx help COMMAND tells more of a command.\n"
           "exit status: 0 ok, 1 failure, 2 config error, 64 usage error\n";
}

void print_help(std::ostream& out, const std::string& command) {
    const CommandRule* c = find_command(command);
    if (!c) return print_usage(out);
    // map reads no config.
    out << "usage: smx " << c->name << (*c->synopsis ? " " : "") << c->synopsis
        << (std::string_view(c->name) == "map" ? "" : " [-c FILE]") << "\n\n"
        << c->summary << ".\n";
    if (*c->details) out << '\n' << c->details;
}

const char* const default_config = SMX_DEFAULT_CONFIG;

void resolve_config(Args& a, const std::string& default_file) {
    if (!a.config_given && ::access(default_file.c_str(), F_OK) == 0) a.config_path = default_file;
    if (!a.config_path.empty()) a.config_source = a.config_path;
    else if (a.config_given) a.config_source = "built-in defaults (-c '')";
    else a.config_source = "built-in defaults (no " + default_file + ")";
}

std::optional<smx::Config> load_checked(const std::string& path, std::ostream& err) {
    try {
        smx::Config cfg = smx::load_config(path);
        if (!cfg.server.user.empty() && !::getpwnam(cfg.server.user.c_str()))
            throw smx::ConfigError("server.user", "no such user '" + cfg.server.user + "'");
        for (auto [key, name] : {std::pair{"server.admin_group", &cfg.server.admin_group},
                                 std::pair{"server.stats_group", &cfg.server.stats_group}})
            if (!name->empty() && !::getgrnam(name->c_str()))
                throw smx::ConfigError(key, "no such group '" + *name + "'");
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
        out += sep + smx::json_string(name) + ": " +
               (is_json_number(value) ? value : smx::json_string(value));
        sep = ",\n  ";
    }
    return out + (out.size() > 1 ? "\n}\n" : "}\n");
}

} // namespace smx::mcp
