#include "libsm/space_account.hpp"

#include "libsm/content_segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>
#include <utility>

namespace smx {
namespace {

std::uint64_t add_sat(std::uint64_t a, std::uint64_t b) {
    return a > std::numeric_limits<std::uint64_t>::max() - b
               ? std::numeric_limits<std::uint64_t>::max()
               : a + b;
}

// A directory kept open for fstatvfs: no path lookup per check. Opened
// again on the next call while it cannot be (not made yet).
class DirFd {
public:
    explicit DirFd(std::string dir) : dir_(std::move(dir)) {}
    ~DirFd() {
        if (fd_ >= 0) ::close(fd_);
    }
    DirFd(const DirFd&) = delete;
    DirFd& operator=(const DirFd&) = delete;
    std::optional<std::uint64_t> free() {
        std::lock_guard lk(mu_);
        if (fd_ < 0) fd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        struct statvfs vfs;
        if (fd_ < 0 || ::fstatvfs(fd_, &vfs) != 0) return std::nullopt;
        return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    }

private:
    std::string dir_;
    std::mutex mu_;
    int fd_ = -1;
};

// SMTPS's account writes to the segments; QMGR reads and removes them: to
// the other it is just sizes, nothing it follows or reads.
std::optional<std::uint64_t> segment_bytes(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return errno == ENOENT ? std::optional<std::uint64_t>(0) : std::nullopt;
    DIR* d = ::fdopendir(fd);
    if (!d) {
        ::close(fd);
        return std::nullopt;
    }
    std::uint64_t n = 0;
    while (const dirent* e = ::readdir(d)) {
        struct stat st;
        if (content::segment_of_file_name(e->d_name).empty() ||
            ::fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
            continue;
        // No segment is larger, whatever SMTPS's account made of the file
        // (a sparse 2^40 bytes would have refused all mail).
        n = add_sat(n, std::min(static_cast<std::uint64_t>(st.st_size), content::segment_max_size));
    }
    ::closedir(d);
    return n;
}

} // namespace

SpaceAccount::Gauges SpaceAccount::measure(const std::string& dir, const std::string& content_dir) {
    Gauges g;
    g.free = [fd = std::make_shared<DirFd>(dir)] { return fd->free(); };
    if (!content_dir.empty())
        g.segments = [d = content::segments_dir(content_dir)] { return segment_bytes(d); };
    return g;
}

SpaceAccount::SpaceAccount(std::uint64_t reserve, Gauges gauges)
    : reserve_(reserve), gauges_(std::move(gauges)) {}

SpaceAccount::Claim& SpaceAccount::Claim::operator=(Claim&& o) noexcept {
    if (this != &o) {
        release();
        account_ = std::exchange(o.account_, nullptr);
        now_ = o.now_;
        copy_ = o.copy_;
        written_ = o.written_;
    }
    return *this;
}

void SpaceAccount::Claim::release() {
    if (!account_) return;
    std::lock_guard lk(account_->mu_);
    account_->claimed_ -= now_ + copy_;
    if (written_) account_->copies_written_ = add_sat(account_->copies_written_, copy_);
    account_ = nullptr;
}

std::optional<std::uint64_t> SpaceAccount::room_locked() {
    const auto free = this->free();
    if (!free) return std::nullopt;
    const std::uint64_t counted = add_sat(add_sat(claimed_, segments_), add_sat(copies_written_, owed_));
    return *free > counted ? *free - counted : 0;
}

bool SpaceAccount::fits_locked(std::uint64_t now, std::uint64_t copy) {
    const auto room = room_locked();
    return !room || *room >= add_sat(reserve_, add_sat(now, copy));
}

bool SpaceAccount::has_room(std::uint64_t now, std::uint64_t copy) {
    if (reserve_ == 0) return true;
    std::lock_guard lk(mu_);
    return fits_locked(now, copy);
}

std::optional<SpaceAccount::Claim> SpaceAccount::claim(std::uint64_t now, std::uint64_t copy) {
    if (reserve_ == 0) return Claim();
    std::lock_guard lk(mu_);
    if (!fits_locked(now, copy)) return std::nullopt;
    // A claim's bytes are bounded by a message's size: no overflow.
    claimed_ += now + copy;
    return Claim(this, now, copy);
}

void SpaceAccount::recount_segments() {
    if (!gauges_.segments) return;
    std::uint64_t before;
    {
        std::lock_guard lk(mu_);
        if (recounting_) return;
        recounting_ = true;
        before = copies_written_;
    }
    const auto n = gauges_.segments();
    std::lock_guard lk(mu_);
    recounting_ = false;
    listed_ = std::chrono::steady_clock::now();
    if (!n) return;  // the old count stands until a list succeeds
    // Copies written while the list ran may be in it or not: they stay
    // counted (twice at worst) until the next one.
    segments_ = *n;
    copies_written_ -= before;
}

bool SpaceAccount::recount_due() {
    if (reserve_ == 0 || !gauges_.segments) return false;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard lk(mu_);
    if (recounting_ || now - listed_ < std::chrono::seconds(1)) return false;
    listed_ = now;  // one caller has it run; the others see it fresh
    return true;
}

void SpaceAccount::set_owed(std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    owed_ = bytes;
}

std::optional<std::uint64_t> SpaceAccount::room() {
    std::lock_guard lk(mu_);
    return room_locked();
}

} // namespace smx
