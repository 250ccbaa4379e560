// `smx run`: validate the config, prepare directories, the pid lock and the
// listeners, then hand over to the Supervisor.
#pragma once

#include "mcp/cli.hpp"

namespace smx::mcp {

int run(const Args& args);

} // namespace smx::mcp
