// A locally submitted message as the sendmail command queues it, as
// postfix's cleanup treats local mail: line ends made CRLF, a leading mbox
// "From " line dropped, Bcc: removed, and From:, Date: and Message-ID:
// added when missing; with -t the recipients of To:, Cc: and Bcc: (of the
// Resent- ones when there are any). Pure: no I/O, unit-tested on its own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace smx::sendmail {

// Collects a message line by line, without the line ends, up to a size.
class Collector {
public:
    explicit Collector(std::uint64_t max_size) : max_size_(max_size) {}
    // Raw input of the command: LF or CRLF ends a line, a bare CR ends one
    // too (as SMTPS's bare_lf = "normalize"); a last line without an end
    // counts. Without ignore_dots a line of one dot ends the message: true
    // then, and nothing after it is taken.
    bool bytes(std::string_view b, bool ignore_dots);
    void end_of_input();
    // Over max_size: the lines after that are counted, not kept.
    bool too_big() const { return size_ > max_size_; }
    std::uint64_t size() const { return size_; }
    const std::vector<std::string>& lines() const { return lines_; }

private:
    // A line of `length` bytes, of which `kept` (all of it while the
    // message is within max_size).
    void take(std::string_view kept, std::uint64_t length);

    std::uint64_t max_size_;
    std::uint64_t size_ = 0;  // as stored: each line and its CRLF
    std::vector<std::string> lines_;
    std::string partial_;
    std::uint64_t partial_len_ = 0;  // of the line under way, kept or not
    bool held_cr_ = false;  // the last piece ended in a CR
    bool ended_ = false;
};

// What the headers added need to know.
struct Local {
    std::string sender;    // envelope sender: From: names it (the login's when null)
    std::string login_address;
    std::string fullname;  // may be empty
    std::string hostname;  // for Message-ID:
    std::uint64_t now_us = 0;
    std::string random;    // unique part of Message-ID:
};

struct Prepared {
    std::string content;                  // CRLF line ends, ends in CRLF
    std::vector<std::string> header_rcpts;  // with extract: as written in the headers
};

Prepared prepare(const std::vector<std::string>& lines, const Local& local, bool extract);

// The addresses of an RFC 5322 address list (a header field's value,
// unfolded): angle addresses, or the bare address without comments;
// display names and group names are dropped.
std::vector<std::string> address_list(std::string_view value);

// A display name as a header may carry it: as it is when it is only
// words of letters, digits and spaces, else quoted; control characters
// (a line break would start a header of its own) become spaces.
std::string display_name(std::string_view name);

} // namespace smx::sendmail
