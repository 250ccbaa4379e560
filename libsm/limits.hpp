// Descriptor limits. Every SMTP session holds a socket, and one more
// descriptor for its content file while it writes it; the usual soft limit
// of 1024 would not even cover the default max_connections.
#pragma once

#include "config.hpp"

#include <string>

namespace sm {

// Raises the soft RLIMIT_NOFILE to the hard limit; returns the soft limit now
// in force (the old one when it cannot be raised).
unsigned long raise_nofile();

// Descriptors SMTPS needs for `sessions` concurrent sessions: two each, a
// reserve for logs, the spool and the sync pool, and each event loop's own
// (its listening sockets, epoll, eventfd, timerfd, QMGR link and accept spare).
unsigned long descriptors_needed(const ServerConfig& s, unsigned sessions);

// The max_connections that fits in `limit` descriptors (server.max_connections
// or less); when it is less, `warning` says so for the log or check-config.
unsigned fitting_connections(const ServerConfig& s, unsigned long limit, std::string& warning);

} // namespace sm
