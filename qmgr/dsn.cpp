#include "qmgr/dsn.hpp"

#include "libsm/dsn_params.hpp"
#include "libsm/ids.hpp"
#include "libsm/smtp_io.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace smx::qmgr::dsn {
namespace {

constexpr std::size_t fold_width = 78;   // RFC 5322 "SHOULD"
constexpr std::size_t max_line = 998;    // RFC 5322 "MUST", without CRLF

// Report fields are US-ASCII (RFC 3464): control characters (a CR or LF in a
// reply text would end the field) and 8-bit bytes become '?'.
// Appends text as lines of at most fold_width bytes, broken at spaces;
// continuation lines start with indent (" " folds a header field). A word
// longer than a line allows is cut at max_line.
void wrap(std::string& out, std::string_view text, std::string_view indent) {
    std::string line;
    bool has_word = false;
    auto emit = [&] {
        out += line;
        out += "\r\n";
        line.assign(indent);
        has_word = false;
    };
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t sp = text.find(' ', pos);
        std::string_view word = text.substr(pos, sp == std::string_view::npos ? sp : sp - pos);
        pos = sp == std::string_view::npos ? text.size() : sp + 1;
        if (word.empty()) continue;
        if (has_word && line.size() + 1 + word.size() > fold_width) emit();
        if (has_word) line += ' ';
        line += word;
        has_word = true;
        while (line.size() > max_line) {
            std::string rest = line.substr(max_line);
            line.resize(max_line);
            emit();
            line += rest;
            has_word = true;
        }
    }
    if (has_word) emit();
}

void field(std::string& out, std::string_view name, std::string_view value) {
    wrap(out, std::string(name) + ": " + smx::smtp::printable(value), " ");
}

// "Original-Recipient: rfc822; a@b" from ORCPT=rfc822;a@b.
std::optional<std::string> original_recipient(std::string_view params) {
    auto v = smx::dsn::param(params, "ORCPT");
    if (!v) return std::nullopt;
    std::size_t semi = v->find(';');
    if (semi == std::string::npos || semi + 1 == v->size()) return std::nullopt;
    return std::string(v->substr(0, semi)) + "; " + smx::dsn::xtext_decode(v->substr(semi + 1));
}

const char* action_name(Action a) {
    switch (a) {
    case Action::failed: return "failed";
    case Action::delayed: return "delayed";
    case Action::relayed: return "relayed";
    }
    return "failed";
}

// "mx.example.net[192.0.2.1]:25" → "mx.example.net"; a bare "[192.0.2.1]"
// stays an address literal.
std::string remote_host(std::string_view relay) {
    std::size_t br = relay.find('[');
    if (br == 0 || br == std::string_view::npos) {
        std::size_t end = relay.find(']');
        return std::string(end == std::string_view::npos ? relay : relay.substr(0, end + 1));
    }
    return std::string(relay.substr(0, br));
}

// Without an enhanced status the reply code gives the class; a reason of
// our own without one is temporary.
std::string status_of(const FailedRcpt& r) {
    if (!r.reply.enhanced.empty()) return r.reply.enhanced;
    return r.reply.code >= 500 ? "5.0.0" : "4.0.0";
}

void human_part(std::string& out, const Report& rep, const std::vector<FailedRcpt>& rcpts,
                Action kind) {
    const bool failed = kind == Action::failed;
    out += "Content-Description: Notification\r\n"
           "Content-Type: text/plain; charset=us-ascii\r\n\r\n";
    wrap(out, "This is the mail system at host " + smx::smtp::printable(rep.reporting_mta) + ".", "");
    out += "\r\n";
    if (failed) {
        wrap(out, "I'm sorry to have to inform you that your message could not be delivered to one "
                  "or more recipients. Its headers are attached below.", "");
    } else if (kind == Action::relayed) {
        wrap(out, "Your message was successfully relayed to the destinations listed below. They "
                  "do not send delivery notifications, so you will hear no more of it from here.", "");
    } else {
        wrap(out, "####### THIS IS A WARNING ONLY. YOU DO NOT NEED TO RESEND YOUR MESSAGE. #######", "");
        out += "\r\n";
        wrap(out, "Your message could not be delivered to one or more recipients yet. The mail "
                  "system will keep trying until its queue lifetime ends.", "");
    }
    out += "\r\n";
    wrap(out, "For further assistance, please send mail to postmaster.", "");
    out += "\r\n";
    wrap(out, "If you do so, please include this problem report.", "");
    out += "\r\n                   The mail system\r\n\r\n";
    for (const auto& r : rcpts) {
        std::string line = "<" + smx::smtp::printable(r.addr) + ">: ";
        if (!r.remote_mta.empty())
            line += (r.action == Action::relayed ? "relayed via " : "host ") +
                    smx::smtp::printable(remote_host(r.remote_mta)) + (r.action == Action::relayed ? ": " : " said: ");
        line += smx::smtp::printable(smx::msg::to_string(r.reply));
        if (r.action == Action::delayed) line += " (still being retried)";
        wrap(out, line, "    ");
        out += "\r\n";
    }
}

void status_part(std::string& out, const smx::msg::TaCommit& ta, const Report& rep,
                 const std::vector<FailedRcpt>& rcpts) {
    out += "Content-Description: Delivery report\r\n"
           "Content-Type: message/delivery-status\r\n\r\n";
    field(out, "Reporting-MTA", "dns; " + rep.reporting_mta);
    field(out, "X-Smx-Queue-ID", ta.ta_id);
    if (auto envid = smx::dsn::param(ta.params, "ENVID"))
        field(out, "Original-Envelope-Id", smx::dsn::xtext_decode(*envid));
    if (ta.arrival_us) field(out, "Arrival-Date", smx::rfc5322_date(ta.arrival_us));
    for (const auto& r : rcpts) {
        out += "\r\n";
        field(out, "Final-Recipient", "rfc822; " + r.addr);
        if (auto orig = original_recipient(r.params)) field(out, "Original-Recipient", *orig);
        field(out, "Action", action_name(r.action));
        field(out, "Status", status_of(r));
        if (!r.remote_mta.empty()) field(out, "Remote-MTA", "dns; " + remote_host(r.remote_mta));
        // Only a server's reply is an "smtp" diagnostic (RFC 3464 2.3.6):
        // without a remote MTA the code is SMTPC's own (a connection failure).
        if (r.reply.code && !r.remote_mta.empty())
            field(out, "Diagnostic-Code", "smtp; " + smx::msg::to_string(r.reply));
        else field(out, "Diagnostic-Code", "X-smx; " + r.reply.text);
        if (r.last_attempt_us) field(out, "Last-Attempt-Date", smx::rfc5322_date(r.last_attempt_us));
    }
}

// The original header section (whole: the message) with CRLF line ends;
// lines over max_line are cut.
std::string crlf_lines(std::string_view h, bool whole) {
    std::string out;
    std::size_t pos = 0;
    while (pos < h.size()) {
        std::size_t lf = h.find('\n', pos);
        std::string_view line = h.substr(pos, lf == std::string_view::npos ? lf : lf - pos);
        pos = lf == std::string_view::npos ? h.size() : lf + 1;
        if (line.ends_with('\r')) line.remove_suffix(1);
        if (line.empty() && !whole) break;  // end of the header section
        out += line.substr(0, max_line);
        out += "\r\n";
    }
    return out;
}

bool has_8bit(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return true;
    return false;
}

} // namespace

bool should_bounce(const smx::msg::TaCommit& original) { return !original.sender.empty(); }

std::string build(const smx::msg::TaCommit& original, const std::vector<FailedRcpt>& rcpts,
                  const Report& rep) {
    // The report is about failures if any recipient failed, else delays if
    // any is delayed, else successes.
    Action kind = Action::relayed;
    for (const auto& r : rcpts)
        if (r.action == Action::failed || (r.action == Action::delayed && kind == Action::relayed))
            kind = r.action;
    const bool failed = kind == Action::failed;
    // RFC 3461 4.3: only a report of failures returns more than the headers.
    const bool full = failed && !rep.original_message.empty();
    std::string headers = full ? crlf_lines(rep.original_message, true) : crlf_lines(rep.original_headers, false);

    std::string human, status;
    human_part(human, rep, rcpts, kind);
    status_part(status, original, rep, rcpts);

    // The boundary must not occur in any part (RFC 2046 5.1.1).
    std::string boundary = smx::smtp::printable(rep.dsn_id + "/" + rep.reporting_mta);
    for (int n = 1; headers.find(boundary) != std::string::npos || human.find(boundary) != std::string::npos ||
                    status.find(boundary) != std::string::npos;
         ++n)
        boundary = smx::smtp::printable(rep.dsn_id + "/" + rep.reporting_mta) + "." + std::to_string(n);

    std::string out;
    field(out, "From", "Mail Delivery System <MAILER-DAEMON@" + rep.reporting_mta + ">");
    field(out, "To", "<" + original.sender + ">");
    field(out, "Subject", failed                    ? "Undelivered Mail Returned to Sender"
                          : kind == Action::delayed ? "Delayed Mail (still being retried)"
                                                    : "Successful Mail Delivery Report");
    field(out, "Date", smx::rfc5322_date(rep.now_us));
    field(out, "Message-ID", "<" + rep.dsn_id + "@" + rep.reporting_mta + ">");
    field(out, "Auto-Submitted", "auto-replied");
    field(out, "MIME-Version", "1.0");
    field(out, "Content-Type", "multipart/report; report-type=delivery-status; boundary=\"" + boundary + "\"");
    if (has_8bit(headers)) field(out, "Content-Transfer-Encoding", "8bit");
    out += "\r\nThis is a MIME-encapsulated message.\r\n\r\n";
    out += "--" + boundary + "\r\n" + human + "\r\n";
    out += "--" + boundary + "\r\n" + status + "\r\n";
    out += "--" + boundary + "\r\n";
    out += full ? "Content-Description: Undelivered Message\r\n"
                  "Content-Type: message/rfc822\r\n"
                : "Content-Description: Undelivered Message Headers\r\n"
                  "Content-Type: text/rfc822-headers\r\n";
    if (has_8bit(headers)) out += "Content-Transfer-Encoding: 8bit\r\n";
    out += "\r\n" + headers + "\r\n";
    out += "--" + boundary + "--\r\n";
    return out;
}

std::optional<std::string> read_header_section(const smx::content::Body& body, std::string& err,
                                               std::size_t cap) {
    std::string buf;
    if (const int e = body.read_at(0, cap, buf)) {
        err = std::string("read error: ") + std::strerror(e);
        return std::nullopt;
    }
    // The first empty line ends the header section; without one inside the
    // cap, keep the whole lines read.
    std::size_t pos = 0;
    while (pos < buf.size()) {
        std::size_t lf = buf.find('\n', pos);
        if (lf == std::string::npos) break;
        std::string_view line(buf.data() + pos, lf - pos);
        if (line.empty() || line == "\r") return buf.substr(0, pos);
        pos = lf + 1;
    }
    const bool whole = buf.size() == body.size();
    return buf.substr(0, whole ? buf.size() : pos);
}

std::optional<std::string> read_message(const smx::content::Body& body, std::string& err,
                                        std::size_t cap) {
    if (body.size() > cap) {
        err = "larger than " + std::to_string(cap) + " bytes";
        return std::nullopt;
    }
    std::string buf;
    if (const int e = body.read_at(0, cap, buf)) {
        err = std::string("read error: ") + std::strerror(e);
        return std::nullopt;
    }
    return buf;
}

FailedRcpt failed_rcpt(const std::string& addr, smx::msg::Reply reply, std::string relay) {
    FailedRcpt f;
    f.addr = addr;
    f.reply = std::move(reply);
    f.remote_mta = std::move(relay);
    return f;
}

FailedRcpt expired_rcpt(const std::string& addr, const smx::msg::Reply& last, std::string relay,
                        std::uint64_t last_attempt_us) {
    auto f = failed_rcpt(addr, last, std::move(relay));
    f.reply.enhanced = "4.4.7";
    f.reply.text = "message expired in queue: " + last.text;
    f.last_attempt_us = last_attempt_us;
    return f;
}

} // namespace smx::qmgr::dsn
