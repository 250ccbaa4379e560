// The log line of a recipient's outcome, in postfix's shape (pflogsumm
// counts delivered, deferred and bounced by it; docs/operation.md, Logs):
//   ID: to=<r>, relay=mx[192.0.2.1]:25, delay=1.2, delays=0.01/0.05/0.3/0.84,
//       dsn=2.0.0, status=sent (250 2.0.0 Ok: queued as X)
//   ID: to=<r>, relay=none, delay=0.4, delays=0.01/0.02/0.37/0, dsn=4.4.1,
//       status=deferred (connect to ...: Connection refused)
// delay: arrival (end of DATA) to now; delays, as postfix's: a = arrival
// to when QMGR took the message into memory this time (intake, recovery,
// due again from DEFEDB), b = from then until the DELIVER went to SMTPC,
// c = SMTPC's connection setup (0 over a cached connection), d = the rest
// of the attempt. Without an attempt (no route, expiry, a destination
// suspended) c = d = 0 and b runs to now.
#pragma once

#include "libsm/messages.hpp"
#include "qmgr/queue.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace smx::qmgr {

// One delivery attempt, as far as it got.
struct Attempt {
    std::string relay;           // "host[ip]:port" of the server that answered; empty: none
    std::uint64_t sent_us = 0;   // the DELIVER went out; 0: no attempt
    std::uint64_t setup_us = 0;  // SMTPC's connection setup
};

// status: "sent", "deferred" or "bounced".
void log_status(const Ta& ta, std::uint32_t idx, const Attempt& at, std::string_view status,
                const smx::msg::Reply& reply, std::uint64_t now_us);

} // namespace smx::qmgr
