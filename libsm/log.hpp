// Logging: spdlog, postfix-style lines "smx/qmgr[pid]: ID: event".
#pragma once

#include "config.hpp"

#include <spdlog/spdlog.h>
#include <string>

namespace sm {

// Sets the default logger for a process named e.g. "smtps".
void init_logging(const std::string& process, const LogConfig& cfg);

// Writes out every line logged so far, synchronously (a log thread writes them):
// for sm::panic and sm::fatal, just before the process ends. Bounded: it
// gives up after a second rather than hang a dying process.
void drain_log();

} // namespace sm
