#include "libsm/content_trust.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string_view>

namespace smx::content {

namespace {

std::string type_of(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
    return "not a regular file";
}

bool parse_uid(std::string_view s, uid_t& out) {
    unsigned long v = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return false;
    out = static_cast<uid_t>(v);
    return static_cast<unsigned long>(out) == v;
}

} // namespace

std::string writers_env_value(const Writers& w) {
    return std::to_string(w.smtps) + ":" + std::to_string(w.qmgr);
}

Writers writers_from_env() {
    const uid_t self = ::geteuid();
    Writers w{self, self};
    const char* v = std::getenv(writers_env);
    if (!v) return w;
    const std::string_view s(v);
    const auto colon = s.find(':');
    Writers parsed;
    // A malformed value (only the MCP sets it) trusts nobody but ourselves.
    if (colon == s.npos || !parse_uid(s.substr(0, colon), parsed.smtps) ||
        !parse_uid(s.substr(colon + 1), parsed.qmgr))
        return w;
    return parsed;
}

Expect message_file(const Writers& w, std::uint64_t size) {
    return Expect{w.smtps, w.qmgr, size, true};
}

int open_checked(const std::string& path, const Expect& e, int& fd, std::uint64_t& size,
                 std::string& why) {
    size = 0;
    fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        const int err = errno;
        why = err == ELOOP   ? "a symbolic link"
              : err == ENXIO ? "a socket"  // open(2) of a socket
                             : std::strerror(err);
        return err == ENXIO ? EBADMSG : err;
    }
    struct stat st;
    int err = 0;
    if (::fstat(fd, &st) != 0) {
        err = errno;
        why = std::strerror(err);
    } else if (!S_ISREG(st.st_mode)) {
        why = type_of(st.st_mode);
    } else if (st.st_nlink != 1) {
        why = std::to_string(st.st_nlink) + " hard links";
    } else if (st.st_uid != e.owner && st.st_uid != e.other_owner) {
        why = "owned by uid " + std::to_string(st.st_uid) + ", which did not write it";
    } else if (e.exact ? static_cast<std::uint64_t>(st.st_size) != e.max_size
                       : static_cast<std::uint64_t>(st.st_size) > e.max_size) {
        why = std::to_string(st.st_size) + " bytes, " + (e.exact ? "" : "at most ") +
              std::to_string(e.max_size) + " expected";
    } else {
        size = static_cast<std::uint64_t>(st.st_size);
        return 0;
    }
    ::close(fd);
    fd = -1;
    return err ? err : EBADMSG;
}

} // namespace smx::content
