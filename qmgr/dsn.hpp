// Delivery status notifications (RFC 3464): the bounce QMGR sends to the
// original sender when recipients fail (5xx, or the end of the queue
// lifetime), or a delay warning while they are still being retried.
//
// The DSN is a new transaction from the null sender <> to the original
// sender, queued and delivered like any other mail. It honours the RFC 3461
// parameters the client gave (smx::dsn): ENVID and ORCPT are reported, RET
// (through Report::original_message) says what is returned; NOTIFY decides
// whether the caller builds one at all. Rules for the caller:
//   - never build a DSN for a message from the null sender (should_bounce()
//     is false): that is how bounce loops are prevented (RFC 5321 4.5.5);
//     log the failure and drop it instead;
//   - one DSN per original transaction and event, naming exactly the
//     recipients that failed (or are delayed) at that point.
// The message is plain bytes with CRLF line ends and no line longer than 998
// bytes: multipart/report with a text/plain explanation (like postfix's
// bounce), a message/delivery-status part and the original header section
// as text/rfc822-headers, or the whole original as message/rfc822 when the
// caller gives it (RET=FULL from a trusted client, failures only).
#pragma once

#include "libsm/content_segment.hpp"
#include "libsm/messages.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::qmgr::dsn {

// relayed: delivered to a next hop that does not offer DSN, for a recipient
// with NOTIFY=SUCCESS (RFC 3461 5.2.2.1).
enum class Action { failed, delayed, relayed };

struct FailedRcpt {
    std::string addr;             // Final-Recipient
    std::string params;           // RCPT parameters as received (ORCPT=... gives Original-Recipient)
    smx::msg::Reply reply;         // Diagnostic-Code and Status, as SMTPC (or QMGR) gave it
    std::string remote_mta;       // "host[ip]" or "host[ip]:port" of the server that answered; empty: none did
    Action action = Action::failed;
    std::uint64_t last_attempt_us = 0;  // 0: not reported
};

struct Report {
    std::string reporting_mta;    // cfg.server.hostname
    std::string dsn_id;           // ta-id of the DSN transaction (Message-ID, boundary)
    std::uint64_t now_us = 0;     // Date:
    std::string original_headers; // read_header_section() of the original content file
    std::string original_message; // not empty: the whole original, returned instead of its headers
};

// False for the null sender: such a message is never bounced.
bool should_bounce(const smx::msg::TaCommit& original);

// The whole DSN message for original.sender about rcpts (not empty). The
// subject says "Undelivered" when any recipient failed, else "Delayed".
std::string build(const smx::msg::TaCommit& original, const std::vector<FailedRcpt>& rcpts,
                  const Report& report);

inline constexpr std::size_t max_header_section = 64 * 1024;
// RET=FULL returns a message up to this size; a larger one only its headers
// (as postfix's bounce_size_limit, which is 50000 bytes).
inline constexpr std::size_t max_returned_message = 1 << 20;

// The header section of an open message body: the bytes before the first
// empty line, at most `cap` bytes (cut after the last whole line). nullopt
// with err when it cannot be read.
std::optional<std::string> read_header_section(const smx::content::Body& body, std::string& err,
                                               std::size_t cap = max_header_section);

// The whole message if it has at most `cap` bytes; nullopt with err when it
// is larger or cannot be read.
std::optional<std::string> read_message(const smx::content::Body& body, std::string& err,
                                        std::size_t cap = max_returned_message);

FailedRcpt failed_rcpt(const std::string& addr, smx::msg::Reply reply, std::string relay);
// The end of the queue lifetime after the last reply (status 4.4.7).
FailedRcpt expired_rcpt(const std::string& addr, const smx::msg::Reply& last, std::string relay,
                        std::uint64_t last_attempt_us);

} // namespace smx::qmgr::dsn
