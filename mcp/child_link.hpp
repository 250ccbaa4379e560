// The MCP's end of a child's link (libsm/mcp_link.hpp has the child's end
// and what goes over it): the child's secrets out, its start reports in.
// One per start of a child that takes secrets (smx-smtps, smx-smtpc).
#pragma once

#include "libsm/fd.hpp"
#include "libsm/secrets.hpp"

#include <string>
#include <string_view>
#include <sys/types.h>

namespace smx::mcp {

// One message on a SOCK_SEQPACKET socket: text with fd passed along
// (SCM_RIGHTS); never waits. -1 with errno when it is not sent.
ssize_t send_with_fd(int sock, std::string_view text, int fd);

class ChildLink {
public:
    // A new socketpair, both ends close-on-exec; false with err.
    bool open(std::string& err);
    // The end the child inherits (Launch::mcp_link); the MCP's copy is
    // closed once the child runs, so that the child's exit ends the link.
    int child_end() const { return child_.get(); }
    void child_started() { child_ = smx::Fd(); }

    // The secrets in a new sealed memfd, queued for the child; never waits.
    // False with err when the child does not take them (its queue is full).
    bool send(const smx::Secrets& secrets, std::string& err);

    // Takes what the child reported so far, without waiting. The child is
    // not trusted: a reason is cut and made one printable line.
    void read_reports();
    bool ready() const { return ready_; }
    const std::string& cannot_start() const { return why_; }

private:
    smx::Fd mcp_, child_;
    bool ready_ = false;
    std::string why_;
};

} // namespace smx::mcp
