// The message body as SMTPC sends it: the content file read in large blocks and
// dot-stuffed and with over-long lines broken on the way out (RFC 5321
// 4.5.2, 4.5.3.1.6).
#pragma once

#include "libsm/content_segment.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace smx::smtpc {

// Longer lines go out broken by CRLF SPACE (postfix's
// smtp_line_length_limit = 998, RFC 5321 4.5.3.1.6), which does the least
// harm to MIME; the limit does not count the CRLF.
inline constexpr std::size_t line_length_limit = 998;

// Where the previous block left off: bytes of the current line already
// sent (0: at the start of a line), and whether it ended in a CR that the
// next block's LF may complete.
struct BodyState {
    std::size_t col = 0;
    bool cr = false;
};

// Appends `in` to `out`, doubling a '.' at the start of every line and
// breaking lines over line_length_limit; blocks may be cut anywhere.
void encode_body(std::string_view in, BodyState& st, std::string& out);

// A message's open content (a content file or a segment record,
// smx::content::Body); read with pread so that a retry on another connection
// starts from the beginning again.
class MessageFile {
public:
    // Opens the content content_id names, of transaction ta_id, of the
    // envelope's `size` (a segment from segments when given: a small message
    // is then read in one pread of just its bytes). Empty string on success,
    // else the reason ("queue file missing"); unusable() then says whether
    // the content is there but not what the envelope says.
    std::string open(const smx::content::Store& store, std::string_view content_id,
                     std::string_view ta_id, std::uint64_t size,
                     smx::content::SegmentFds* segments = nullptr);
    bool unusable() const { return unusable_; }
    std::uint64_t size() const { return body_.size(); }
    // Reads up to `max` bytes at `offset` into buf (resized); false on an
    // I/O error.
    bool read_at(std::uint64_t offset, std::size_t max, std::string& buf) const {
        return body_.read_at(offset, max, buf) == 0;
    }

private:
    smx::content::Body body_;
    bool unusable_ = false;
};

} // namespace smx::smtpc
