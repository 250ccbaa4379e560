#include "content_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace sm::content {

int open_tmp(const std::string& tmp, int& fd, mode_t mode) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
        if (fd >= 0) return 0;
        if (errno != ENOENT || attempt > 0) return errno;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(tmp).parent_path(), ec);
        if (ec) return ec.value();
    }
    return EIO;
}

int write_all(int fd, std::string_view data) {
    while (!data.empty()) {
        const ssize_t n = ::write(fd, data.data(), data.size());
        if (n < 0) {
            if (errno == EINTR) continue;
            return errno;
        }
        data.remove_prefix(static_cast<std::size_t>(n));
    }
    return 0;
}

int finish(int fd, int err, const std::string& tmp, const std::string& path) {
    if (fd >= 0 && !err && ::fdatasync(fd) != 0) err = errno;
    if (fd >= 0 && ::close(fd) != 0 && !err) err = errno;
    if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err) ::unlink(tmp.c_str());
    return err;
}

int write_durable(const std::string& path, std::string_view data, mode_t mode) {
    const std::string tmp = path + ".tmp";
    int fd = -1;
    int err = open_tmp(tmp, fd, mode);
    if (!err) err = write_all(fd, data);
    return finish(fd, err, tmp, path);
}

} // namespace sm::content
