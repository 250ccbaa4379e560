// Starting one child process: fork, hand over the listeners, drop
// privileges, exec. Everything the child needs is prepared before fork,
// because between fork and exec only async-signal-safe calls are allowed.
#pragma once

#include "mcp/privsep.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace smx::mcp {

struct Launch {
    std::string path;                // the executable
    std::vector<std::string> argv;   // argv[0] first
    std::vector<int> listen_fds;     // become fds 3, 4, ... with SMX_LISTEN_FDS set
    const RunAs* run_as = nullptr;   // set: setgroups/setgid/setuid before exec
    unsigned listen_loops = 1;       // SMX_LISTEN_LOOPS: listen_fds are this many equal
                                     // groups, one per event loop of the child
    std::string smtps_process;       // SMX_SMTPS_PROCESS when set: "i/n"
    int session_counts = -1;         // set: inherited after the listeners, named by
                                     // SMX_SMTPS_COUNTS (smx::SessionCounts)
    int mcp_link = -1;               // set: inherited after the counts, named by
                                     // SMX_MCP_FD (ChildLink's child end)
    int log_fd = -1;                 // set: inherited last, named by SMX_LOG_FD
                                     // (LogRelay's pipe)
};

// Returns the child's pid, or -1 with err when the child could not exec
// (it reports the failing step through a close-on-exec pipe).
pid_t spawn(const Launch& launch, std::string& err);

} // namespace smx::mcp
