#include "smtpc/body.hpp"

#include <cerrno>
#include <cstring>

namespace smx::smtpc {

void encode_body(std::string_view in, BodyState& st, std::string& out) {
    const char* p = in.data();
    const char* const end = p + in.size();
    if (p < end && st.cr && *p != '\n') ++st.col;  // the CR was a bare one
    st.cr = false;
    while (p < end) {
        if (st.col == 0 && *p == '.') out += '.';
        const void* found = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
        const char* lf = static_cast<const char*>(found);
        const char* stop = lf ? lf + 1 : end;
        // The line's bytes in this block, without its CRLF (or LF); a CR at
        // the end of the block is left for the next block to decide.
        std::size_t text = static_cast<std::size_t>(stop - p);
        if (lf) {
            text -= (lf > p && lf[-1] == '\r') ? 2 : 1;
        } else if (end[-1] == '\r') {
            text -= 1;
            st.cr = true;
        }
        // Break only where more of the line follows, as postfix does: a line
        // of exactly the limit goes out whole.
        while (st.col + text > line_length_limit) {
            const std::size_t room = line_length_limit - std::min(st.col, line_length_limit);
            out.append(p, room);
            out += "\r\n ";
            p += room;
            text -= room;
            st.col = 1;
        }
        out.append(p, static_cast<std::size_t>(stop - p));
        st.col = lf ? 0 : st.col + text;
        p = stop;
    }
}

std::string MessageFile::open(const smx::content::Store& store, std::string_view content_id,
                              std::string_view ta_id, std::uint64_t size,
                              smx::content::SegmentFds* segments) {
    unusable_ = false;
    const int err = body_.open(store, content_id, ta_id, size, segments);
    if (!err) return {};
    if (err == ENOENT) return "queue file missing";
    if (!smx::content::valid_content_id(content_id)) return "bad queue file id";  // not echoed: any bytes
    unusable_ = err == EBADMSG || err == ELOOP;
    return "queue file " + std::string(content_id) + ": " + body_.why();
}

} // namespace smx::smtpc
