#include "body.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smtpc {

void dot_stuff(std::string_view in, bool& bol, std::string& out) {
    if (in.empty()) return;
    std::size_t copied = 0;  // in[0, copied) is already in out
    if (bol && in[0] == '.') out += '.';
    const char* base = in.data();
    std::size_t pos = 0;
    while (pos < in.size()) {
        const void* lf = std::memchr(base + pos, '\n', in.size() - pos);
        if (!lf) break;
        const std::size_t next = static_cast<const char*>(lf) - base + 1;
        if (next < in.size() && in[next] == '.') {
            out.append(base + copied, next - copied);
            out += '.';
            copied = next;
        }
        pos = next;
    }
    out.append(base + copied, in.size() - copied);
    bol = in.back() == '\n';
}

MessageFile::~MessageFile() {
    if (fd_ >= 0) ::close(fd_);
}

std::string MessageFile::open(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) {
        if (errno == ENOENT) return "queue file missing";
        return "queue file " + path + ": " + std::strerror(errno);
    }
    struct stat st {};
    if (::fstat(fd_, &st) != 0) return "queue file " + path + ": " + std::strerror(errno);
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
