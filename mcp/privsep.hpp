// Privilege separation, as in sendmail X and OpenSMTPD: started as root,
// `smx run` gives each child its own account and lays out the spool so that
// each can touch only what it needs (docs/mcp.md has the table):
//   SMTPS  creates content files in cdb/ (queue.content_dir); as smx-pickup
//          it owns maildrop/ and maildrop-quarantine/
//   local users create files in maildrop/ only through smx-postdrop
//          (setgid server.maildrop_group)
//   SMTPC  reads content files, nothing else in the spool
//   QMGR   owns cdb/ (bounces, unlinks), ibdb/ (queue.ibdb_dir), defedb/,
//          quarantine/, run_dir
// Every path a child could have replaced is opened without following
// symbolic links, and the MCP changes owners and modes only through fds.
#pragma once

#include "libsm/config.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace smx::mcp {

// One child's account, looked up before fork (the child may only make
// async-signal-safe calls).
struct RunAs {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
};

struct Accounts {
    RunAs smtps, qmgr, smtpc;
    gid_t group = 0;        // [server] group: content files, qmgr.sock, the log file
    gid_t smtps_group = 0;  // SMTPS's own group: may create files in cdb/
    gid_t maildrop_group = 0;  // server.maildrop_group: smx-postdrop's, may create in maildrop/
};

// Set only when we are root. An account or group that does not exist is an
// error naming the key and how to create it.
std::optional<Accounts> lookup_accounts(const smx::Config& cfg, std::string& err);

// Creates the spool (cdb/ with 00..FF when cdb_hashed, ibdb/, defedb/,
// quarantine/, maildrop/, maildrop-quarantine/; content_dir and ibdb_dir
// where they are set) and the run
// directory. With accounts, also gives every
// directory and the files in it to their owner, with the modes of the table.
bool make_dirs(const smx::Config& cfg, const Accounts* accounts, std::string& err);

// Started as root: each child's account can reach what it needs (after
// make_dirs): search on every directory on the way to its stores and the
// run directory, read on the config file (config_path, when not empty),
// judged by owners and modes (a directory or file with an ACL passes). False
// with err naming the account, the directory or file, its mode and owner:
// one smx did not make, such as a home directory of 0700 above ./var.
bool check_reach(const smx::Config& cfg, const std::string& config_path, const Accounts& accounts,
                 std::string& err);

} // namespace smx::mcp
