#include "quarantine.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace smx::qmgr {

std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    const std::string path = dir + "/" + name;
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return path + ": " + std::strerror(errno);
    int err = 0;
    for (std::size_t off = 0; off < bytes.size() && !err;) {
        const ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
        if (n < 0 && errno != EINTR) err = errno;
        if (n > 0) off += static_cast<std::size_t>(n);
    }
    if (!err && ::fdatasync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    if (!err) return {};
    ::unlink(path.c_str());
    return path + ": " + std::strerror(err);
}

} // namespace smx::qmgr
