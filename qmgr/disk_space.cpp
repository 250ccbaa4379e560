#include "qmgr/disk_space.hpp"

#include "libsm/content_segment.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {
namespace {

std::optional<dev_t> device_of(const std::string& dir) {
    struct stat st;
    if (::stat(dir.c_str(), &st) != 0) return std::nullopt;
    return st.st_dev;
}

// The reserve files: in the DEFEDB directory, and in ibdb_dir when it lies
// on another file system. Both directories are QMGR's alone.
std::vector<std::string> reserve_dirs(const smx::Config& cfg) {
    std::vector<std::string> dirs{cfg.defedb_dir_abs()};
    const auto ibdb = device_of(cfg.ibdb_dir_abs());
    if (ibdb && ibdb != device_of(dirs.front())) dirs.push_back(cfg.ibdb_dir_abs());
    return dirs;
}

std::string reserve_path(const std::string& dir) { return dir + "/" + reserve_file_name; }

bool reserve_present(const std::string& path) {
    struct stat st;
    return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           static_cast<std::uint64_t>(st.st_size) == reserve_file_size;
}

// Allocated under a temporary name, then renamed: a reserve file is whole
// or absent. Not synced: one lost in a power cut is made again.
int make_reserve(const std::string& path) {
    const std::string tmp = path + ".tmp";
    ::unlink(tmp.c_str());  // what a crash in here left
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    int err = ::posix_fallocate(fd, 0, static_cast<off_t>(reserve_file_size));
    if (::close(fd) != 0 && !err) err = errno;
    if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err) ::unlink(tmp.c_str());
    return err;
}

} // namespace

void DiskSpace::give_back_if_short(const smx::Config& cfg) {
    for (const auto& dir : reserve_dirs(cfg)) {
        const std::string path = reserve_path(dir);
        struct statvfs vfs;
        if (!reserve_present(path) || ::statvfs(dir.c_str(), &vfs) != 0) continue;
        const auto free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        if (free >= reserve_file_size) continue;
        if (::unlink(path.c_str()) != 0) {
            spdlog::error("{}: cannot give back the emergency reserve: {}", path, std::strerror(errno));
            continue;
        }
        spdlog::warn("{}: {} bytes free: emergency reserve of {} bytes given back for recovery, "
                     "made again when space returns",
                     dir, free, reserve_file_size);
    }
}

DiskSpace::DiskSpace(const smx::Config& cfg) : min_free_(cfg.queue.min_free_space) {
    const std::string content = cfg.content_dir_abs();
    // The content first: its account counts the segments.
    for (const auto& dir : {content, cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(), cfg.spool_dir_abs()}) {
        const auto dev = device_of(dir);
        if (!dev || std::any_of(fs_.begin(), fs_.end(), [&](const Fs& f) { return f.dev == *dev; }))
            continue;
        Fs fs;
        fs.dev = *dev;
        fs.dir = dir;
        fs.account = std::make_unique<smx::SpaceAccount>(
            min_free_, smx::SpaceAccount::measure(dir, dir == content ? content : std::string()));
        fs_.push_back(std::move(fs));
    }
    if (!fs_.empty() && fs_.front().dir == content) content_ = &fs_.front();
    for (const auto& dir : reserve_dirs(cfg))
        for (auto& fs : fs_)
            if (fs.dev == device_of(dir)) fs.reserve = reserve_path(dir);
    for (auto& fs : fs_) keep_reserve(fs);
}

void DiskSpace::keep_reserve(Fs& fs) {
    if (fs.reserve.empty()) return;
    bool present = reserve_present(fs.reserve);
    if (!present) {
        // Room as intake counts it, without what the missing file owes.
        const auto room = fs.account->room();
        if (room && *room + fs.owed >= reserve_file_size + std::max(min_free_, reserve_file_size)) {
            const int err = make_reserve(fs.reserve);
            present = err == 0;
            if (present)
                spdlog::info("{}: emergency reserve of {} bytes made", fs.reserve, reserve_file_size);
            else if (err != fs.make_error)
                spdlog::error("{}: cannot make the emergency reserve: {}", fs.reserve,
                              std::strerror(err));
            fs.make_error = err;
        }
    }
    fs.owed = present ? 0 : reserve_file_size;
    fs.account->set_owed(fs.owed);
}

std::string DiskSpace::admit(const smx::msg::TaCommit& env) {
    if (min_free_ == 0) return {};
    for (auto& fs : fs_)
        if (&fs != content_ && !fs.account->has_room(0)) return fs.dir;
    if (!content_) return {};
    // The content is on disk already; a segment's record is copied out
    // when it is first deferred.
    const std::uint64_t copy = smx::content::parse_segment_ref(env.content_id) ? env.size : 0;
    auto claim = content_->account->claim(0, copy);
    if (!claim) return content_->dir;
    claim->written();
    return {};
}

std::optional<DiskSpace::Fullest> DiskSpace::watch() {
    if (content_) content_->account->recount_segments();
    std::optional<Fullest> fullest;
    std::uint64_t least = 0;
    for (auto& fs : fs_) {
        keep_reserve(fs);
        const auto free = fs.account->free();
        const auto room = fs.account->room();
        if (!free || !room) continue;
        const bool short_of_space = !fs.account->has_room(0);
        if (!fullest || short_of_space > fullest->short_of_space ||
            (short_of_space == fullest->short_of_space && *room < least)) {
            fullest = Fullest{fs.dir, *free, short_of_space};
            least = *room;
        }
    }
    return fullest;
}

} // namespace smx::qmgr
