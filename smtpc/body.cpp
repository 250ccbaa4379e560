#include "body.hpp"

#include "content_file.hpp"
#include "ids.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smtpc {

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

MessageFile::~MessageFile() {
    if (fd_ >= 0) ::close(fd_);
}

std::string MessageFile::open(const std::string& content_dir, std::string_view id, bool hashed) {
    if (const int err = sm::content::open_read(content_dir, id, hashed, fd_)) {
        if (err == ENOENT) return "queue file missing";
        if (!sm::valid_ta_id(id)) return "bad queue file id";  // not echoed: any bytes
        return "queue file " + std::string(id) + ": " + std::strerror(err);
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return "queue file " + std::string(id) + ": " + std::strerror(errno);
    size_ = static_cast<std::uint64_t>(st.st_size);
    return {};
}

bool MessageFile::read_at(std::uint64_t offset, std::size_t max, std::string& buf) const {
    buf.resize(max);
    std::size_t got = 0;
    while (got < max) {
        const ssize_t n = ::pread(fd_, buf.data() + got, max - got,
                                  static_cast<off_t>(offset + got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    buf.resize(got);
    return true;
}

} // namespace smtpc
