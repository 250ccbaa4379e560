// Reload, the MCP's side and `smx reload` (docs/operation.md, "Reload").
//
// SIGHUP to the MCP (what `smx reload` sends it): the MCP checks the file as
// `smx check-config` does and reads the secrets again (secret_files.hpp). A
// file or a secret that does not pass changes nothing. Otherwise the MCP
// names the keys that need a restart (they keep their running values), sets
// its log level, passes each child its new secrets and sends it SIGHUP; the
// child loads the file again and hands it over (libsm/config_reload.hpp). The
// outcome goes to <run_dir>/reload.status, where `smx reload` waits for it.
#pragma once

#include "libsm/config.hpp"
#include "mcp/cli.hpp"
#include "mcp/secret_files.hpp"

#include <chrono>
#include <optional>
#include <string>

namespace smx::mcp {

struct ReloadOutcome {
    bool ok = false;
    std::string text;  // what was reloaded and what needs a restart, or why not
    std::optional<ChildSecrets> secrets;  // when ok: the children's new ones
};

// Checks the file at path (empty: built-in defaults) against the running
// config and reads its secrets; on success sets the MCP's log level. Does
// not signal anyone.
ReloadOutcome check_reload(const std::string& path, const smx::Config& running);

// "<pid> <taken> ok|error\n<text>\n" to <run_dir>/reload.status, written to
// a new file and renamed over the old one (never through a link QMGR's
// account may have planted in its run directory). taken: when the MCP took
// the SIGHUP (steady clock, ns: CLOCK_MONOTONIC, the same in every
// process). False with err.
bool write_reload_status(const std::string& run_dir, std::chrono::steady_clock::time_point taken,
                         const ReloadOutcome& o, std::string& err);

// `smx reload`: checks the file itself (exit_config on an error), sends
// SIGHUP to the pid in <run_dir>/smx.pid and waits up to 10 s for that
// MCP's outcome of a SIGHUP taken after ours was sent (so it read the file
// after we were called; signals sent together are taken as one):
// exit_ok, exit_config (the MCP refused the file), or exit_failed (not
// running, no answer).
int reload_command(const Args& args, std::ostream& out, std::ostream& err);

} // namespace smx::mcp
