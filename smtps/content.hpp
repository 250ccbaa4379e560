// The message content of DATA, line by line as the LineReader hands it out:
// the end-of-data line, dot-unstuffing, bare CR / bare LF (rejected, or
// normalised to CRLF), lines over 998 octets broken (libsm/line_break.hpp:
// what milters see and sign is what goes out), the size limit, the Received: hop count and the
// Message-ID (for the log); and of
// BDAT (RFC 3030), whose chunks are raw octets that BdatContent cuts into
// the same lines, without the dot. Pure: no I/O, so that it is unit-tested
// and fuzzed on its own.
#pragma once

#include "libsm/line_break.hpp"
#include "libsm/smtp_io.hpp"
#include "smtps/policy.hpp"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

namespace smx::smtps {

struct Content {
    bool too_big = false;   // over max_size: nothing more is passed on
    bool bare_eol = false;  // bare LF or bare CR seen (reject mode)
    unsigned hops = 0;      // Received: header fields
    std::string message_id;  // the first Message-ID header's value, at most max_message_id
};

// Longer Message-IDs are cut for the log line.
inline constexpr std::size_t max_message_id = 512;

class ContentReader {
public:
    // dots: DATA's end-of-data line and dot-stuffing; BDAT has neither.
    ContentReader(bool normalize_bare_eol, std::uint64_t max_size, bool dots = true)
        : normalize_(normalize_bare_eol), dots_(dots), max_size_(max_size) {}

    // One line or piece of a long line. Passes the message bytes it holds to
    // out(std::string_view) and returns true when it is the end-of-data dot
    // (only CRLF.CRLF ends DATA: a dot after a bare LF does not).
    template <class Out>
    bool feed(const smx::smtp::Line& l, Out&& out);

    const Content& result() const { return c_; }

private:
    bool normalize_;
    bool dots_;
    std::uint64_t max_size_;
    Content c_;
    // line_start: this piece begins a line. after_crlf: the previous line
    // ended in a real CRLF, the only start the end-of-data dot may have.
    bool line_start_ = true, after_crlf_ = true, in_header_ = true;
    // The last header line was "Message-ID:" with its value still to come
    // on a folded line.
    bool message_id_next_ = false;
    std::uint64_t size_ = 0;  // as received (the limit is on that), before lines are broken
    smx::LineState lines_;
};

template <class Out>
bool ContentReader::feed(const smx::smtp::Line& l, Out&& out) {
    std::string_view t = l.text;
    if (dots_) {
        if (after_crlf_ && l.complete && !l.bare_lf && t == ".") return true;
        if (line_start_ && !t.empty() && t.front() == '.') t.remove_prefix(1);
    }
    if (line_start_ && in_header_) {
        const bool folded = !t.empty() && (t.front() == ' ' || t.front() == '\t');
        const bool field = istarts_with(t, "Message-ID:");
        if (t.empty()) {
            in_header_ = false;
        } else if (istarts_with(t, "Received:")) {
            ++c_.hops;
        } else if (c_.message_id.empty() && (field || (folded && message_id_next_))) {
            std::string_view v = field ? t.substr(11) : t;
            while (!v.empty() && (v.front() == ' ' || v.front() == '\t')) v.remove_prefix(1);
            while (!v.empty() && (v.back() == ' ' || v.back() == '\t')) v.remove_suffix(1);
            c_.message_id.assign(v.substr(0, max_message_id));
        }
        message_id_next_ = c_.message_id.empty() && (field || (folded && message_id_next_));
    }
    const auto bare_crs = static_cast<std::size_t>(std::count(t.begin(), t.end(), '\r'));
    if ((l.bare_lf || bare_crs) && !normalize_) c_.bare_eol = true;
    // What is stored: a normalised bare CR becomes two bytes.
    size_ += t.size() + bare_crs + (l.complete ? 2 : 0);
    if (size_ > max_size_) c_.too_big = true;
    if (!c_.too_big && !c_.bare_eol) {
        const auto emit = [&](std::string_view b) { smx::break_lines(b, lines_, false, out); };
        // Each bare CR becomes CRLF (normalise mode; else none got here).
        for (std::size_t cr; (cr = t.find('\r')) != std::string_view::npos;) {
            emit(t.substr(0, cr));
            emit(std::string_view("\r\n"));
            t.remove_prefix(cr + 1);
        }
        emit(t);
        if (l.complete) emit(std::string_view("\r\n"));
    }
    line_start_ = l.complete;
    after_crlf_ = l.complete && !l.bare_lf;
    return false;
}

// BDAT content: chunks of any size and any cut, as they arrive, turned into
// the lines ContentReader checks. A CR at the end of a piece is held until
// the next byte shows whether it begins a CRLF, so that a CRLF split across
// chunks is one, and a CR then LF in separate chunks is not two bare ones.
class BdatContent {
public:
    BdatContent(bool normalize_bare_eol, std::uint64_t max_size)
        : reader_(normalize_bare_eol, max_size, false) {}

    template <class Out>
    void feed(std::string_view bytes, Out&& out);
    // After the LAST chunk: a held CR is a bare one, and a last line without
    // CRLF gets one (the stored message ends in CRLF, as after DATA).
    template <class Out>
    void finish(Out&& out);

    const Content& result() const { return reader_.result(); }

private:
    template <class Out>
    void line(std::string_view text, bool complete, bool bare_lf, Out& out) {
        smx::smtp::Line l;
        l.text = text;
        l.complete = complete;
        l.bare_lf = bare_lf;
        reader_.feed(l, out);
        open_ = !complete;
    }

    ContentReader reader_;
    bool held_cr_ = false;  // the last piece ended in a CR not yet passed on
    bool open_ = false;     // a line has begun and not ended
};

template <class Out>
void BdatContent::feed(std::string_view b, Out&& out) {
    if (b.empty()) return;
    if (held_cr_) {
        held_cr_ = false;
        if (b.front() == '\n') {
            line({}, true, false, out);
            b.remove_prefix(1);
        } else {
            line("\r", false, false, out);
        }
    }
    for (std::size_t lf; (lf = b.find('\n')) != std::string_view::npos;) {
        const bool crlf = lf > 0 && b[lf - 1] == '\r';
        line(b.substr(0, crlf ? lf - 1 : lf), true, !crlf, out);
        b.remove_prefix(lf + 1);
    }
    if (!b.empty() && b.back() == '\r') {
        held_cr_ = true;
        b.remove_suffix(1);
    }
    if (!b.empty()) line(b, false, false, out);
}

template <class Out>
void BdatContent::finish(Out&& out) {
    if (held_cr_) line("\r", false, false, out);
    held_cr_ = false;
    if (open_) line({}, true, false, out);
}

} // namespace smx::smtps
