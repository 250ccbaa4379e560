// What every child of `smx run` does first (smx-smtps, smx-pickup): take
// its one argument, `-c FILE`, its link to the MCP (SMX_MCP_FD,
// libsm/mcp_link.hpp) and its config. A failure is said on stderr and,
// when the link is there, to the MCP, which then stops rather than restart
// a child that cannot start (docs/mcp.md, Supervision).
#pragma once

#include "libsm/config.hpp"
#include "libsm/mcp_link.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace smx {

struct ChildStart {
    std::string config_path;  // empty: the built-in defaults
    McpLink mcp;
    Config config;
};

// nullopt when the arguments, the link or the config are wrong: the
// process exits 2 (a usage or config error).
std::optional<ChildStart> start_child(std::string_view program, int argc, char** argv);

} // namespace smx
