// The `smx` command line: argument parsing and the commands that only talk
// to QMGR or read the config (everything except `smx run`).
#pragma once

#include "libsm/config.hpp"

#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace smx::mcp {

// Exit statuses of `smx`.
inline constexpr int exit_ok = 0;
inline constexpr int exit_failed = 1;  // QMGR unreachable or refused, bind error, ...
inline constexpr int exit_config = 2;  // bad config: nothing started
inline constexpr int exit_usage = 64;  // EX_USAGE

struct Args {
    std::string command;                 // "run", "stats", "hold", ...
    std::string config_path;             // -c FILE; empty: built-in defaults
    bool json = false;                   // stats --json, queue --json
    std::vector<std::string> operands;   // queue ids for hold/release/delete ...
    // --domain, --sender, --older-than as QMGR takes them: "domain=D",
    // "sender=S", "older-than=SECONDS" (queue, qshape; requeue: domain).
    std::vector<std::string> filters;
    bool config_given = false;           // -c was given (resolve_config leaves it alone)
    std::string config_source{};         // resolve_config: which file, or why none
    bool changed = false;                // config -n: only what differs from the defaults
    bool defaults = false;               // config -d: the defaults
    bool body = false;                   // show --body
};

// "90", "90s", "15m", "1h", "2d", "1w" in seconds; nullopt if malformed or
// over 100 years.
std::optional<std::uint64_t> parse_age(std::string_view s);

// Parses argv. Returns nullopt with a message in err on a usage error.
// --help and --version come back as the commands "help" and "version"
// (--help after a command: "help" with that command as its operand).
std::optional<Args> parse_args(int argc, const char* const* argv, std::string& err);

void print_usage(std::ostream& out);
// `smx help COMMAND`: its synopsis, what it does and more.
void print_help(std::ostream& out, const std::string& command);

// The installed configuration (meson: sysconfdir/smx/smx.toml).
extern const char* const default_config;

// Without -c: config_path becomes default_file when it exists, else stays
// empty (the built-in defaults). Sets config_source either way, for the
// operator: the file read, or "built-in defaults (no FILE)". `-c ''` asks
// for the built-in defaults whatever is installed.
void resolve_config(Args& a, const std::string& default_file = default_config);

// Loads the config and checks what load_config cannot (the [server] user,
// admin_group and stats_group exist; the per-process accounts are checked
// by `smx run` as root only, the one that needs them). The secrets are not
// read here (read_secrets: check-config, run and reload do), so that an
// admin who may not read the key can still use the queue commands. On
// error prints "smx: config error: <key>: <what>" to err. check-config
// (cli_config.hpp) checks the rest.
std::optional<smx::Config> load_checked(const std::string& path, std::ostream& err);

// "name value" lines to one JSON object; values that are JSON numbers stay
// numbers, anything else becomes a string.
std::string stats_to_json(std::string_view text);

} // namespace smx::mcp
