// sendmail -bs: one SMTP session on standard input and output, as postfix
// runs smtpd for it, for programs that submit mail by speaking SMTP to a
// pipe. Each message goes to the maildrop like any other local submission
// (the caller's submit). A single client over a pipe (or a file) that may
// not be watched by epoll: so a plain loop, each read bounded by poll(2)
// with server.command_timeout or data_timeout.
#pragma once

#include "sendmail/message.hpp"

#include "libsm/config.hpp"

#include <functional>
#include <string>
#include <vector>

namespace smx::sendmail {

// What handing a message to smx-postdrop gave: its exit status (0: queued
// as name) and, when it failed, why.
struct Queued {
    int status = 0;
    std::string name;
    std::string error;
};

using Submit = std::function<Queued(const std::string& sender,
                                    const std::vector<std::string>& rcpts,
                                    const std::string& content)>;
// Qualifies a recipient without a domain, or says it is invalid (nullopt).
using Qualify = std::function<std::optional<std::string>(std::string_view addr, bool sender)>;

// Runs the session on fds in and out; returns the command's exit status
// (0 when the client said QUIT or simply ended).
int smtp_session(int in, int out, const smx::Config& cfg, Local local, const Qualify& qualify,
                 const Submit& submit);

} // namespace smx::sendmail
