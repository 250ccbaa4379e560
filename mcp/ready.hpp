// Readiness for a service manager: `smx run` tells systemd (Type=notify)
// that smx is up once SMTPS greets on a listener, not merely when the
// socket is bound (the kernel accepts connections into the backlog long
// before anyone answers them).
#pragma once

#include <string>

namespace smx {

// Connects to the address of a listening socket (loopback for a wildcard
// one), and true when a 220 greeting arrives within a second. The probe
// says QUIT, so SMTPS logs it as an ordinary short session.
bool smtp_greets(int listen_fd);

// sd_notify(3) with a state such as "READY=1"; does nothing when smx was
// not started by a service manager (NOTIFY_SOCKET unset or empty).
void notify_service(const std::string& state);

} // namespace smx
