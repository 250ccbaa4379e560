// Lines over 998 octets broken by CRLF SPACE (postfix's
// smtp_line_length_limit = 998, RFC 5321 4.5.3.1.6), which does the least
// harm to MIME; the limit does not count the CRLF. SMTPS breaks them as the
// message comes in, before milters see it (a DKIM signature made there
// must survive the trip); SMTPC breaks them again on the way out, for
// content that came in another way, and dot-stuffs at the same time.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string_view>

namespace smx {

inline constexpr std::size_t line_length_limit = 998;

// Where the previous piece left off: bytes of the current line passed on
// (0: at the start of a line), and whether it ended in a CR that the next
// piece's LF may complete.
struct LineState {
    std::size_t col = 0;
    bool cr = false;
};

// Passes `in` on to out(std::string_view), breaking lines over
// line_length_limit, and with dot_stuff doubling a '.' at the start of
// every line; pieces may be cut anywhere.
template <class Out>
void break_lines(std::string_view in, LineState& st, bool dot_stuff, Out&& out) {
    const char* p = in.data();
    const char* const end = p + in.size();
    if (p < end && st.cr && *p != '\n') ++st.col;  // the CR was a bare one
    st.cr = false;
    while (p < end) {
        if (dot_stuff && st.col == 0 && *p == '.') out(std::string_view("."));
        const void* found = std::memchr(p, '\n', static_cast<std::size_t>(end - p));
        const char* lf = static_cast<const char*>(found);
        const char* stop = lf ? lf + 1 : end;
        // The line's bytes in this piece, without its CRLF (or LF); a CR at
        // the end of the piece is left for the next piece to decide.
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
            out(std::string_view(p, room));
            out(std::string_view("\r\n "));
            p += room;
            text -= room;
            st.col = 1;
        }
        out(std::string_view(p, static_cast<std::size_t>(stop - p)));
        st.col = lf ? 0 : st.col + text;
        p = stop;
    }
}

} // namespace smx
