#include "quarantine.hpp"

#include "content_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {
namespace {
std::atomic<std::uint64_t> failures{0};

// from's bytes to path, written as a content file is (tmp, fdatasync, rename).
int copy_durable(const std::string& from, const std::string& path) {
    const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
    if (in < 0) return errno;
    const std::string tmp = path + ".tmp";
    int out = -1;
    int err = sm::content::open_tmp(tmp, out, 0600);
    char buf[64 * 1024];
    while (!err) {
        const ssize_t n = ::read(in, buf, sizeof buf);
        if (n == 0) break;
        if (n < 0) {
            if (errno != EINTR) err = errno;
            continue;
        }
        err = sm::content::write_all(out, std::string_view(buf, static_cast<std::size_t>(n)));
    }
    ::close(in);
    return sm::content::finish_tmp(out, err, tmp, path);
}

} // namespace

std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes) {
    const std::string path = dir + "/" + name;
    const int err = sm::content::write_durable(path, bytes, 0600);  // QMGR's alone
    if (!err) return {};
    failures.fetch_add(1, std::memory_order_relaxed);
    return path + ": " + std::strerror(err);
}

int quarantine_move(const std::string& from, const std::string& dir, const std::string& name) {
    const std::string to = dir + "/" + name;
    if (::rename(from.c_str(), to.c_str()) == 0) return 0;
    if (errno != EXDEV) return errno;
    if (const int err = copy_durable(from, to)) {
        if (err != ENOENT) failures.fetch_add(1, std::memory_order_relaxed);
        return err;
    }
    return ::unlink(from.c_str()) == 0 ? 0 : errno;
}

std::uint64_t quarantine_write_failures() { return failures.load(std::memory_order_relaxed); }

} // namespace smx::qmgr
