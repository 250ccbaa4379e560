// The message content of DATA, line by line as the LineReader hands it out:
// the end-of-data line, dot-unstuffing, bare CR / bare LF (rejected, or
// normalised to CRLF), the size limit and the Received: hop count. Pure: no
// I/O, so that it is unit-tested and fuzzed on its own.
#pragma once

#include "policy.hpp"
#include "smtp_io.hpp"

#include <algorithm>
#include <cstdint>
#include <string_view>

namespace smtps {

struct Content {
    bool too_big = false;   // over max_size: nothing more is passed on
    bool bare_eol = false;  // bare LF or bare CR seen (reject mode)
    unsigned hops = 0;      // Received: header fields
};

class ContentReader {
public:
    ContentReader(bool normalize_bare_eol, std::uint64_t max_size)
        : normalize_(normalize_bare_eol), max_size_(max_size) {}

    // One line or piece of a long line. Passes the message bytes it holds to
    // out(std::string_view) and returns true when it is the end-of-data dot
    // (only CRLF.CRLF ends DATA: a dot after a bare LF does not).
    template <class Out>
    bool feed(const sm::smtp::Line& l, Out&& out);

    const Content& result() const { return c_; }

private:
    bool normalize_;
    std::uint64_t max_size_;
    Content c_;
    // line_start: this piece begins a line. after_crlf: the previous line
    // ended in a real CRLF, the only start the end-of-data dot may have.
    bool line_start_ = true, after_crlf_ = true, in_header_ = true;
    std::uint64_t size_ = 0;
};

template <class Out>
bool ContentReader::feed(const sm::smtp::Line& l, Out&& out) {
    std::string_view t = l.text;
    if (after_crlf_ && l.complete && !l.bare_lf && t == ".") return true;
    if (line_start_ && !t.empty() && t.front() == '.') t.remove_prefix(1);
    if (line_start_ && in_header_) {
        if (t.empty()) in_header_ = false;
        else if (istarts_with(t, "Received:")) ++c_.hops;
    }
    const auto bare_crs = static_cast<std::size_t>(std::count(t.begin(), t.end(), '\r'));
    if ((l.bare_lf || bare_crs) && !normalize_) c_.bare_eol = true;
    // What is stored: a normalised bare CR becomes two bytes.
    size_ += t.size() + bare_crs + (l.complete ? 2 : 0);
    if (size_ > max_size_) c_.too_big = true;
    if (!c_.too_big && !c_.bare_eol) {
        // Each bare CR becomes CRLF (normalise mode; else none got here).
        for (std::size_t cr; (cr = t.find('\r')) != std::string_view::npos;) {
            out(t.substr(0, cr));
            out(std::string_view("\r\n"));
            t.remove_prefix(cr + 1);
        }
        out(t);
        if (l.complete) out(std::string_view("\r\n"));
    }
    line_start_ = l.complete;
    after_crlf_ = l.complete && !l.bare_lf;
    return false;
}

} // namespace smtps
