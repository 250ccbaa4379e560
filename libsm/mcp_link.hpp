// A child's end of its link to `smx run` (mcp/child_link.hpp has the
// MCP's): a SOCK_SEQPACKET socket inherited as the fd named by SMX_MCP_FD.
//
// MCP to child: its secrets (libsm/secrets.hpp) as a sealed memfd, one
// message each, queued before the child starts and again before each
// SIGHUP; the child takes the newest at start and on SIGHUP.
// Child to MCP: "ready" once it serves, or "cannot start: <why>" just
// before it exits at start. A child that exits before it was ready makes
// `smx run` stop (docs/mcp.md, Supervision).
#pragma once

#include "libsm/secrets.hpp"

#include <string_view>

namespace smx {

// The text of the MCP's messages, which carry the memfd.
inline constexpr std::string_view link_secrets = "secrets";
// What the child sends.
inline constexpr std::string_view link_ready = "ready";
inline constexpr std::string_view link_cannot_start = "cannot start: ";
// The longest message either way; a longer reason is cut.
inline constexpr std::size_t max_link_message = 1024;

class McpLink {
public:
    // From SMX_MCP_FD. Without it (the child was not started by `smx run`)
    // there are no secrets and the reports go nowhere. Throws
    // std::runtime_error when the variable does not name a socket.
    static McpLink from_env();
    McpLink() = default;
    McpLink(McpLink&& o) noexcept;
    McpLink& operator=(McpLink&& o) noexcept;
    ~McpLink();

    // The newest secrets queued on the link (older ones are dropped), else
    // those taken before. Throws std::runtime_error when what came is not a
    // sealed memfd holding a bundle.
    const Secrets& take_secrets();

    // Reports to the MCP; safe from any thread.
    void ready() const;
    void cannot_start(std::string_view why) const;

private:
    explicit McpLink(int fd) : fd_(fd) {}
    void send(std::string_view msg) const;

    int fd_ = -1;
    Secrets secrets_;
};

} // namespace smx
