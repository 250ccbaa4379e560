// The config commands of `smx`: check-config (what `smx run` would refuse,
// and what it would warn about) and config (the effective configuration, or
// what differs from the defaults, or the defaults, as postconf prints them).
#pragma once

#include "libsm/config.hpp"
#include "mcp/cli.hpp"

#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace smx::mcp {

// What `smx run` checks on this machine before it starts anything, besides
// load_checked, the secrets and the accounts: the directories it makes can
// be made, and the log file can be opened (its directory exists; it is not a
// symbolic link). False with err "<key>: <what>".
bool check_paths(const smx::Config& cfg, std::string& err);

// The [policy] lookup tables open (smx::PolicyTables), as SMTPS will open
// them: false with err "policy.client_access: hash:/x: cannot open ...".
// smx run, check-config and reload refuse a config whose tables do not.
bool check_tables(const smx::Config& cfg, std::string& err);

// What smx accepts but an administrator should look at again, one line each
// naming the key: relay_networks that make an open relay (0.0.0.0/0, ::/0,
// shorter than /8 or /16) or have host bits set, names in relay_domains,
// [routes] and [tls_policy] that are no domain names.
std::vector<std::string> config_warnings(const smx::Config& cfg);

// `smx check-config`: load_checked, read_secrets, the accounts (as root,
// as `smx run` looks them up) and check_paths, so exactly what `smx run`
// would refuse: exit_ok with "config OK (SOURCE)" and a summary, and each
// of config_warnings as "smx: warning: ..." on err; or exit_config. SOURCE:
// source if given, else path or "built-in defaults".
int check_config(const std::string& path, std::ostream& out, std::ostream& err,
                 const std::string& source = {});

// Every key of cfg this build accepts as ("server.listen", "[\"127.0.0.1:2525\"]"),
// in the order of smx::config_keys(), then [routes] and [tls_policy] entries
// ("routes.example.net", "routes.\"example.net\" = ..." is how a line shows it).
std::vector<std::pair<std::string, std::string>> config_entries(const smx::Config& cfg);

// Those of config_entries(cfg) whose value is not the default: not the
// built-in one, or for a key whose default follows others (client.helo_name
// is server.hostname), not what it would be in cfg without it.
std::vector<std::pair<std::string, std::string>> changed_entries(const smx::Config& cfg);

// `smx config [-n|-d] [KEY...]`: "section.key = value" lines in TOML syntax
// (the output is a config file): every key of the effective config, with -n
// those not at their default, with -d the defaults; KEYs select keys, in
// their order. exit_ok, exit_failed for a KEY no such line has, exit_config
// when the config does not load.
int config_command(const Args& args, std::ostream& out, std::ostream& err);

} // namespace smx::mcp
