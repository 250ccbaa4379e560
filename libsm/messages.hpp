// Typed records between SMTPS, QMGR, SMTPC and the CLI (see docs/design.md).
// encode() builds a frame; decode() checks every field strictly and returns
// nullopt with a reason when the record is malformed.
#pragma once

#include "libsm/record.hpp"
#include "libsm/rejections.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace smx::msg {

// 2: SMTPS_LOAD. 4: its rejection counts, and RESULT's setup time.
// 5: ANVIL_REQ and ANVIL_REPLY.
inline constexpr std::uint32_t protocol_version = 5;

enum Type : std::uint16_t {
    HELLO = 1,       // peer → QMGR: role, version
    HELLO_ACK = 2,   // QMGR → peer: status, text
    TA_COMMIT = 10,  // SMTPS → QMGR
    TA_ACK = 11,     // QMGR → SMTPS
    SMTPS_LOAD = 12, // SMTPS → QMGR, when it changes
    ANVIL_REQ = 13,   // SMTPS → QMGR: a client's connection, MAIL or RCPT
    ANVIL_REPLY = 14, // QMGR → SMTPS: its counts
    DELIVER = 20,    // QMGR → SMTPC
    RESULT = 21,     // SMTPC → QMGR
    CTL_REQ = 30,    // CLI → QMGR
    CTL_REPLY = 31,  // QMGR → CLI
};

struct Hello {
    std::string role;  // "smtps", "smtpc", "cli"
    std::uint32_t version = protocol_version;
    std::uint32_t pid = 0;
};

struct HelloAck {
    std::uint32_t status = 0;  // 0 = accepted
    std::string text;
};

struct Recipient {
    std::string addr;    // without angle brackets
    std::string params;  // ESMTP RCPT parameters as received (may be empty)
};

struct TaCommit {
    std::string ta_id;
    std::string client_addr;  // "127.0.0.1"
    std::string client_name;  // reverse name or "unknown"
    std::string helo;
    std::string sender;       // empty for the null sender <>
    std::string params;       // ESMTP MAIL parameters
    std::vector<Recipient> rcpts;
    std::string content_id;
    std::uint64_t size = 0;        // bytes in the content file
    std::uint64_t arrival_us = 0;  // unix time in microseconds
    // Set: an access table's HOLD said so, and why ("<s@x>: Sender address
    // triggers HOLD action"). QMGR puts every recipient on hold (`smx queue`
    // shows the reason; `smx release` lets them go), recovery too.
    std::string hold = {};
    // Set: smx-pickup's non_smtpd_milters refused this local mail, with
    // this reply ("550 5.7.1 text"). QMGR bounces every recipient with it,
    // as postfix's cleanup bounces local mail it rejects (the user's
    // sendmail has long returned), recovery too.
    std::string refused = {};
};

// Milter failures are counted by the failed milter's default action, in
// MilterAction's order (libsm/config.hpp): tempfail, accept, reject,
// quarantine.
inline constexpr std::size_t milter_actions = 4;
using MilterFailureCounts = std::array<std::uint64_t, milter_actions>;

// One SMTPS event loop's sessions and transactions, for `smx stats`: sent
// when they change, at most once a second. smx-pickup sends one with its
// milter failures alone.
struct SmtpsLoad {
    std::uint32_t loop = 0;          // its index in its process, from 0
    std::uint64_t sessions = 0;      // connections it serves
    std::uint64_t transactions = 0;  // from MAIL to the reply after the content
    std::uint64_t waiting = 0;       // MAILs waiting for server.max_transactions
    // Refusals since the loop's last report (QMGR adds them up).
    std::vector<RejectionCounts::Entry> rejected = {};
    // Milters that failed since the last report (QMGR adds them up).
    MilterFailureCounts milter_failures = {};
    bool operator==(const SmtpsLoad&) const = default;
};

// Per-client counting in QMGR's anvil (qmgr/anvil.hpp). disconnect and
// unused_rcpt get no reply (req_id 0); the others an AnvilReply.
enum class AnvilOp : std::uint32_t {
    connect,      // a connection begins: counts it (concurrent and rate)
    disconnect,   // it ended
    mail,         // a MAIL: counts it; may grant one RCPT ahead (rcpt_limit)
    rcpt,         // a RCPT without a granted one: counts it
    unused_rcpt,  // a granted RCPT the transaction did not use
};
inline constexpr std::uint32_t anvil_ops = 5;
// The longest client key: an IPv6 network with its prefix length.
inline constexpr std::size_t max_anvil_client = 64;

struct AnvilRequest {
    AnvilOp op = AnvilOp::connect;
    std::string client;  // "192.0.2.1", or "2001:db8:1:2::/64"
    // mail: grant one RCPT ahead when the MAIL is within mail_limit (0: no
    // limit) and the client's recipient rate below rcpt_limit (0: none).
    std::uint32_t mail_limit = 0;
    std::uint32_t rcpt_limit = 0;
};

struct AnvilReply {
    std::uint32_t connections = 0;  // the client's now, this one included
    std::uint32_t rate = 0;         // of the op's kind in this rate_time_unit, this one included
    bool rcpt_granted = false;      // mail: one RCPT is counted ahead
};

enum class AckStatus : std::uint32_t { ok = 0, tempfail = 1, reject = 2 };

// The text of QMGR's reject of a transaction id it already holds, which
// smx-pickup takes as "your earlier commit went through".
inline constexpr std::string_view duplicate_ta = "duplicate transaction id";

struct TaAck {
    std::string ta_id;
    AckStatus status = AckStatus::ok;
    std::string text;  // reply text for SMTPS when not ok
};

struct DeliverRcpt {
    std::uint32_t idx = 0;  // recipient index within the transaction
    std::string addr;
    std::string params;  // its RCPT parameters as received (NOTIFY, ORCPT)
};

struct Deliver {
    std::uint64_t da_id = 0;
    std::string ta_id;
    std::string content_id;
    std::string sender;
    std::uint64_t size = 0;
    std::vector<DeliverRcpt> rcpts;
    // Next hops in order: "[host]:port" (no MX lookup), "host:port" (MX
    // lookup of host), or "mx" (MX lookup of the recipient domain).
    std::vector<std::string> nexthops;
    std::string params;  // the MAIL parameters as received (BODY, SMTPUTF8, RET, ENVID)
};

// An SMTP reply kept structured from SMTPC to the DSN, so nothing flattens
// it into text and parses it again. Whether a server gave it is known by
// the relay kept beside it (empty: SMTPC's own reply for a failed
// connection); code 0 is a reason of QMGR's own (no route, suspended).
struct Reply {
    std::uint32_t code = 0;
    std::string enhanced;  // "4.4.1" or empty
    std::string text;
    bool operator==(const Reply&) const = default;
};
// "451 4.3.0 text"; without a code "4.4.1 text".
std::string to_string(const Reply& r);

struct RcptResult {
    std::uint32_t idx = 0;
    std::uint32_t code = 0;  // SMTP reply code; 4xx also for connection failures
    std::string enhanced;    // "2.0.0" or empty
    std::string text;
    Reply reply() const { return {code, enhanced, text}; }
};

struct Result {
    std::uint64_t da_id = 0;
    std::string relay;  // "host[ip]:port" of the server that answered, or empty
    std::vector<RcptResult> rcpts;
    bool peer_dsn = false;  // that server offered DSN: NOTIFY went on with the mail
    // Connection setup (DNS, connect, greeting, EHLO, TLS, AUTH) in
    // microseconds; 0 over a connection used before (postfix's delays=c).
    std::uint64_t setup_us = 0;
    // Set when the content was not what the envelope says (a link, a FIFO,
    // another size, another transaction's record...): why. QMGR then
    // quarantines the transaction; every recipient carries a 4.3.0.
    std::string content_error = {};
};

struct CtlRequest {
    std::string command;  // "stats", "queue", "flush", "hold", ...
    std::vector<std::string> args;
};
// Queue ids in one hold, release or delete request (the CLI sends more in
// several), so that the reply, a line per id, stays far below rec::max_body.
inline constexpr std::size_t max_ctl_ids = 1000;

struct CtlReply {
    std::uint32_t status = 0;  // 0 ok, else error with text
    std::string text;
};

std::string encode(const Hello&, std::uint64_t req_id = 0);
std::string encode(const HelloAck&, std::uint64_t req_id = 0);
std::string encode(const TaCommit&, std::uint64_t req_id);
std::string encode(const TaAck&, std::uint64_t req_id);
std::string encode(const SmtpsLoad&, std::uint64_t req_id = 0);
std::string encode(const AnvilRequest&, std::uint64_t req_id = 0);
std::string encode(const AnvilReply&, std::uint64_t req_id);
std::string encode(const Deliver&, std::uint64_t req_id = 0);
std::string encode(const Result&, std::uint64_t req_id = 0);
std::string encode(const CtlRequest&, std::uint64_t req_id = 0);
std::string encode(const CtlReply&, std::uint64_t req_id = 0);

// Decodes the body of a frame whose header type matches T.
template <class T>
std::optional<T> decode(const rec::Frame& f, std::string& err);

// The most an envelope (a TaCommit's fields) may take: well inside the frame
// limit, so that the TA_COMMIT, its IBDB record, its DEFEDB records and the
// DELIVERs made from it all fit. SMTPS refuses recipients beyond it (452).
inline constexpr std::size_t max_envelope = rec::max_body - (256u << 10);
// What one recipient adds to an envelope: its fields and their TLV headers.
inline constexpr std::size_t rcpt_overhead = 3 * 6;
// What recipients add to an envelope.
std::size_t recipients_size(std::span<const Recipient> rcpts);
// What an envelope takes of max_envelope: sender, MAIL parameters, HELO name
// and each recipient.
std::size_t envelope_size(std::string_view sender, std::string_view params, std::string_view helo,
                          std::span<const Recipient> rcpts = {});

// The bytes of a TaCommit without the frame header, for the IBDB log.
std::string envelope_bytes(const TaCommit&);
std::optional<TaCommit> envelope_from_bytes(std::string_view body, std::string& err);

} // namespace smx::msg
