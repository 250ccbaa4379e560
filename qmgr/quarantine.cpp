#include "qmgr/quarantine.hpp"

#include "libsm/content_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {
namespace {
std::atomic<std::uint64_t> failures{0};

// The checked file at fd (size bytes) to path, written as a content file
// is (tmp, fdatasync, rename), a piece at a time.
int copy_durable(int in, std::uint64_t size, const std::string& path) {
    const std::string tmp = path + ".tmp";
    int out = -1;
    int err = smx::content::open_tmp(tmp, out, 0600);
    char buf[64 * 1024];
    for (std::uint64_t done = 0; !err && done < size;) {
        const ssize_t n = ::pread(in, buf, sizeof buf, static_cast<off_t>(done));
        if (n == 0) break;  // cut short since it was checked: what there is
        if (n < 0) {
            if (errno != EINTR) err = errno;
            continue;
        }
        const auto got = static_cast<std::size_t>(std::min<std::uint64_t>(
            static_cast<std::uint64_t>(n), size - done));
        err = smx::content::write_all(out, std::string_view(buf, got));
        done += got;
    }
    return smx::content::finish_tmp(out, err, tmp, path);
}

bool not_content(int err) { return err == EBADMSG || err == ELOOP; }

} // namespace

std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes) {
    const std::string path = dir + "/" + name;
    const int err = smx::content::write_durable(path, bytes, 0600);  // QMGR's alone
    if (!err) return {};
    failures.fetch_add(1, std::memory_order_relaxed);
    return path + ": " + std::strerror(err);
}

int quarantine_move(const std::string& from, const std::string& dir, const std::string& name,
                    const smx::content::Expect& expect, std::string& why) {
    const std::string to = dir + "/" + name;
    int fd = -1;
    std::uint64_t size = 0;
    if (::rename(from.c_str(), to.c_str()) == 0) {
        // A rename moves whatever had the name; in QMGR's own directory it
        // stays put while it is looked at.
        const int err = smx::content::open_checked(to, expect, fd, size, why);
        if (err) ::unlink(to.c_str());
        else ::close(fd);
        return err;
    }
    if (errno != EXDEV) {
        why = std::strerror(errno);
        return errno;
    }
    if (const int err = smx::content::open_checked(from, expect, fd, size, why)) {
        if (not_content(err)) ::unlink(from.c_str());
        return err;
    }
    const int err = copy_durable(fd, size, to);
    ::close(fd);
    if (err) {
        failures.fetch_add(1, std::memory_order_relaxed);
        why = std::strerror(err);
        return err;
    }
    if (::unlink(from.c_str()) == 0) return 0;
    why = std::strerror(errno);
    return errno;
}

std::uint64_t quarantine_write_failures() { return failures.load(std::memory_order_relaxed); }

} // namespace smx::qmgr
