// Logging: spdlog, postfix-style lines "smx/qmgr[pid]: ID: event".
#pragma once

#include "config.hpp"

#include <spdlog/spdlog.h>
#include <string>

namespace sm {

// Sets the default logger for a process named e.g. "smtps".
void init_logging(const std::string& process, const LogConfig& cfg);

} // namespace sm
