// The message body as SMTPC sends it: the content file read in large blocks and
// dot-stuffed and with over-long lines broken on the way out (RFC 5321
// 4.5.2, 4.5.3.1.6).
#pragma once

#include "libsm/content_segment.hpp"
#include "libsm/line_break.hpp"

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace smx::smtpc {

using BodyState = smx::LineState;

// Appends `in` to `out`, doubling a '.' at the start of every line and
// breaking lines over smx::line_length_limit (libsm/line_break.hpp); blocks
// may be cut anywhere.
inline void encode_body(std::string_view in, BodyState& st, std::string& out) {
    smx::break_lines(in, st, true, [&out](std::string_view b) { out.append(b); });
}

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
