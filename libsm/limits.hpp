// Descriptor limits. Every SMTP session holds a socket, and one more
// descriptor for its content file while it writes it; the usual soft limit
// of 1024 would not even cover the default max_connections.
#pragma once

#include "libsm/config.hpp"

#include <string>

namespace smx {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now
// in force (the old one when it cannot be raised).
unsigned long raise_nofile();

// Descriptors SMTPS needs for `sessions` concurrent sessions: two each, a
// reserve for logs, the spool and the sync pool, and each event loop's own
// (its listening sockets, epoll, eventfd, timerfd, QMGR link and accept spare).
unsigned long descriptors_needed(const ServerConfig& s, unsigned sessions);

// The sessions whose descriptors fit in `limit` beside the fixed ones (at least 1).
unsigned sessions_fitting(const ServerConfig& s, unsigned long limit);

// The max_connections that fits in `limit` descriptors (server.max_connections
// or less); when it is less, `warning` says so for the log or check-config.
unsigned fitting_connections(const ServerConfig& s, unsigned long limit, std::string& warning);

// How `smx run` splits SMTP service: `processes` smx-smtps processes (each
// with its own descriptor limit, so that together they hold more sessions
// than one may) of `loops` event loops each.
struct SmtpsLayout {
    unsigned processes = 1;
    unsigned loops = 1;
};
// The event loops of each of `processes` smx-smtps processes: server.threads,
// or when 0 the CPUs shared out among them (at least one each).
unsigned loops_per_process(unsigned threads, unsigned processes);

// server.processes, or when 0 the fewest (up to max_smtps_processes) whose
// shares of max_connections, and a tenth more for an uneven spread, fit in
// `limit` descriptors each, of loops_per_process loops. When even then a
// process's share does not fit, `warning` says so (as fitting_connections;
// each process lowers its share).
SmtpsLayout smtps_layout(const ServerConfig& s, unsigned long limit, std::string& warning);

// One of `processes` smx-smtps processes' part of the server-wide limits:
// max_connections and max_transactions divided among them, rounded up (the
// kernel spreads connections evenly, by a hash of their addresses).
// smx-smtps counts max_connections for all of them together
// (smx::SessionCounts), QMGR's anvil max_connections_per_client; the share
// is what the layout must fit.
ServerConfig process_share(const ServerConfig& s, unsigned processes);

} // namespace smx
