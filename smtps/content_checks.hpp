// postfix's header_checks and body_checks (header_checks(5)) on a message
// as SMTPS receives it: the content (CRLF line ends, as ContentReader
// passes it on) goes in, split by MessageParts; each header field (a folded
// one as one string) is looked up in policy.header_checks and each body
// line, up to policy.body_checks_size_limit bytes of body, in
// policy.body_checks; what comes out is the content to store, with the
// fields and lines the actions dropped, replaced or prepended, and the
// verdict on the message: REJECT, DISCARD, HOLD, or a failed lookup.
//
// Pure: the tables and two callbacks (what to store, what to log) are
// all it talks to, so that it is tested without a session.
#pragma once

#include "libsm/lookup_table.hpp"
#include "libsm/rejections.hpp"
#include "libsm/message_parts.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace smx::smtps {

// A body line longer than this is checked in pieces of it, as postfix
// checks a long line by its line_length_limit (2048) records.
inline constexpr std::size_t body_check_piece = 2048;
// What PREPEND and REPLACE may add to one message, in all: past it they
// are skipped (and logged), so that a table cannot grow a message without
// end (a PREPEND on every body line).
inline constexpr std::size_t max_check_additions = 1 << 20;

struct ContentVerdict {
    enum class Kind { accept, reject, discard, tempfail };
    Kind kind = Kind::accept;
    std::string reply;  // reject, tempfail: the SMTP reply
    smx::Rejection why = smx::Rejection::header_check;  // reject, tempfail
    std::string hold;   // set: a HOLD, and why (for `smx queue`)
};

// One thing to log, as postfix's cleanup logs it:
// "ID: <action>: <what> <content> from client; from=<s> to=<r> ...: <text>".
struct CheckEvent {
    // reject, discard, hold, warning, info, replace, prepend; "failed" (a
    // lookup failed), "unsupported" (an action smx does not take, or one
    // refused: text says which and why).
    std::string_view action;
    std::string_view what;     // "header" or "body"
    std::string_view content;  // what was checked: printable, at most 200 bytes
    std::string_view text;     // the action's text, or the reply's (reject)
};

class ContentChecks {
public:
    using Emit = std::function<void(std::string_view)>;
    using Log = std::function<void(const CheckEvent&)>;

    // Tables: must outlive this (a session's Settings hold them).
    ContentChecks(const table::TableList& header_checks, const table::TableList& body_checks,
                  std::uint64_t header_size_limit, std::uint64_t body_checks_size_limit, Emit emit,
                  Log log);

    // Content bytes as they come, then finish() at its end. Without
    // tables they go straight through.
    void feed(std::string_view bytes) {
        if (header_checks_.empty() && body_checks_.empty()) return emit_(bytes);
        parts_.feed(bytes, *this);
    }
    void finish();
    const ContentVerdict& verdict() const { return verdict_; }

    // MessageParts' sink.
    void header(std::string_view field);
    void end_of_headers(bool blank_line);
    void body(std::string_view bytes);

private:
    // A body line (or piece), with its CRLF if it has one.
    void body_line(std::string_view line);
    // item (a field or line as stored) looked up in tables and acted on;
    // what: "header" or "body".
    void check(const table::TableList& tables, std::string_view what, std::string_view item);
    // The table's result for key; false: leave out what was checked.
    bool act(std::string_view value, std::string_view what, std::string_view key,
             std::string_view original);
    // Something to store: nothing once the message will not be.
    void out(std::string_view s) {
        if (verdict_.kind == ContentVerdict::Kind::accept) emit_(s);
    }
    bool stopped() const { return verdict_.kind != ContentVerdict::Kind::accept; }
    void log(std::string_view action, std::string_view what, std::string_view key,
             std::string_view text);

    const table::TableList& header_checks_;
    const table::TableList& body_checks_;
    const std::uint64_t body_limit_;
    const Emit emit_;
    const Log log_;
    smx::MessageParts parts_;
    ContentVerdict verdict_;
    std::string line_;            // a body line under way (checked when whole)
    std::uint64_t body_seen_ = 0;  // body bytes looked at so far
    std::size_t added_ = 0;        // bytes PREPEND and REPLACE added
};

} // namespace smx::smtps
