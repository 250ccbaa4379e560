// The SMTP listening sockets: one SO_REUSEPORT group per listen address with
// one socket per SMTPS event loop, so that the kernel spreads connections
// over the loops by a hash of their addresses (each loop has its own accept
// queue) instead of every loop waking on one shared queue. The MCP binds
// them (privileged ports, before it drops privileges) and keeps them for its
// whole life, because closing a socket of a group drops the connections
// queued on it; smx-smtps started alone binds its own.
#pragma once

#include "libsm/config.hpp"

#include <string>
#include <vector>

namespace smx {

// server.threads resolved: 0 is one loop per two CPUs this process may run
// on (its affinity, so that taskset or a cgroup's cpuset is respected), at
// least 1 and at most the configurable 64. SMTPS does about 60% of the
// relay's work per message; QMGR, SMTPC and the kernel's network work run on
// the other CPUs, and more loops than that only sleep and wake more often,
// each with less work (docs/design.md, SMTPS on every core). The MCP and
// SMTPS call this with the same mask: the children inherit the MCP's.
unsigned event_loops(unsigned configured);

// Binds and listens on every address `loops` times (close-on-exec, backlog
// 1024, SO_REUSEADDR, SO_REUSEPORT; IPv6 ones IPV6_V6ONLY). Appends the fds
// loop by loop: loop i's are fds[i * addrs.size() + a] for address a. False
// with err; the fds opened so far are in fds then (the caller closes them).
bool listen_all(const std::vector<HostPort>& addrs, unsigned loops, std::vector<int>& fds,
                std::string& err);

} // namespace smx
