// Readiness probes of the MCP: QMGR is ready when it answers a HELLO on its
// socket, SMTPS when it greets on a listener (not merely when the socket is
// bound: the kernel accepts connections into the backlog long before anyone
// answers them); systemd (Type=notify) is told once SMTPS greets.
//
// Each probe runs for at most a second, and returns false at once when one
// of the signals in `wake` is pending (left pending: the supervisor takes
// it), so that a probe never delays a reload or a stop.
#pragma once

#include <signal.h>

#include <string>

namespace smx::mcp {

// True when QMGR answers a HELLO on its socket at path.
bool qmgr_answers(const std::string& path, const sigset_t& wake);

// Connects to the address of a listening socket (loopback for a wildcard
// one), and true when a 220 greeting arrives. The probe says QUIT, so SMTPS
// logs it as an ordinary short session.
bool smtp_greets(int listen_fd, const sigset_t& wake);

// sd_notify(3) with a state such as "READY=1"; does nothing when smx was
// not started by a service manager (NOTIFY_SOCKET unset or empty).
void notify_service(const std::string& state);

} // namespace smx::mcp
