#include "libsm/content_file.hpp"

#include "libsm/content_trust.hpp"
#include "libsm/ids.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>

namespace smx::content {

namespace {

int open_for_write(const std::string& path, int flags, int& fd, mode_t mode) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        // Read and write: SMTPS reads a spilled message back for its milters.
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | flags, mode);
        if (fd >= 0) return 0;
        if (errno != ENOENT || attempt > 0) return errno;
        std::error_code ec;
        std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
        if (ec) return ec.value();
    }
    return EIO;
}

// fsync of path's directory (its name durable); on failure path is unlinked.
int sync_parent(const std::string& path) {
    const int err = sync_dir(std::filesystem::path(path).parent_path().string());
    if (err) ::unlink(path.c_str());
    return err;
}

} // namespace

int create(const std::string& path, int& fd, mode_t mode) {
    return open_for_write(path, O_EXCL, fd, mode);
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

int close_created(int fd, int err, const std::string& path, bool sync, bool sync_name) {
    if (fd < 0) return err;
    if (!err && sync && ::fdatasync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    if (err) {
        ::unlink(path.c_str());
        return err;
    }
    return sync_name ? sync_parent(path) : 0;
}

int open_tmp(const std::string& tmp, int& fd, mode_t mode) {
    // A new file every time, never one that is there: a writer that crashed
    // may have left the .tmp, and in a content directory SMTPS's account
    // may have put anything under that name (a link to the envelope log:
    // opening it with O_TRUNC would have truncated that). The directory is
    // ours to unlink in; a name that keeps coming back is an error.
    for (int attempt = 0; attempt < 3; ++attempt) {
        const int err = open_for_write(tmp, O_EXCL, fd, mode);
        if (err != EEXIST) return err;
        if (::unlink(tmp.c_str()) != 0 && errno != ENOENT) return errno;
    }
    return EEXIST;
}

int finish_tmp(int fd, int err, const std::string& tmp, const std::string& path, bool sync_name) {
    err = close_created(fd, err, tmp);
    if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) {
        err = errno;
        ::unlink(tmp.c_str());
        return err;
    }
    return !err && sync_name ? sync_parent(path) : err;
}

int write_durable(const std::string& path, std::string_view data, mode_t mode, bool sync_name) {
    const std::string tmp = path + ".tmp";
    int fd = -1;
    int err = open_tmp(tmp, fd, mode);
    if (!err) err = write_all(fd, data);
    return finish_tmp(fd, err, tmp, path, sync_name);
}

int sync_dir(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    const int err = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    return err;
}

bool same_file_system(const std::string& a, const std::string& b) {
    struct stat sa, sb;
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev;
}

bool sync_names(const Config& cfg) {
    return cfg.queue.content_sync == QueueConfig::ContentSync::file && !cfg.queue.test_no_sync &&
           !same_file_system(cfg.content_dir_abs(), cfg.ibdb_dir_abs());
}

Store store_for(const Config& cfg) {
    return Store{cfg.content_dir_abs(), cfg.queue.cdb_hashed, writers_from_env()};
}

std::string file_path(const std::string& content_dir, std::string_view id, bool hashed) {
    std::string p = content_dir + "/";
    if (hashed) {
        // FNV-1a: the low id digits alone would cluster by counter.
        std::uint32_t h = 2166136261u;
        for (char c : id) h = (h ^ static_cast<unsigned char>(c)) * 16777619u;
        static const char hex[] = "0123456789ABCDEF";
        p += hex[(h >> 4) & 15];
        p += hex[h & 15];
        p += '/';
    }
    p.append(id);
    return p;
}

int open_read(const std::string& content_dir, std::string_view id, bool hashed,
              const Expect& expect, int& fd, std::uint64_t& size, std::string& why) {
    fd = -1;
    if (!valid_ta_id(id)) {
        why = "not a content file id";
        return EINVAL;
    }
    return open_checked(file_path(content_dir, id, hashed), expect, fd, size, why);
}

int check_read(const std::string& content_dir, std::string_view id, bool hashed,
               const Expect& expect, std::string& why) {
    int fd = -1;
    std::uint64_t size = 0;
    const int err = open_read(content_dir, id, hashed, expect, fd, size, why);
    if (fd >= 0) ::close(fd);
    return err;
}

int remove(const std::string& content_dir, std::string_view id, bool hashed) {
    if (!valid_ta_id(id)) return EINVAL;
    return ::unlink(file_path(content_dir, id, hashed).c_str()) == 0 ? 0 : errno;
}

int list(const std::string& content_dir, std::chrono::system_clock::time_point cutoff,
         std::vector<std::string>& ids) {
    namespace fs = std::filesystem;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(content_dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::string name = it->path().filename().string();
        // What is there, not what a link points to: its type and its time.
        struct stat st;
        if (!valid_ta_id(name) || ::lstat(it->path().c_str(), &st) != 0 || S_ISDIR(st.st_mode))
            continue;
        const auto t = std::chrono::system_clock::from_time_t(st.st_mtim.tv_sec) +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::nanoseconds(st.st_mtim.tv_nsec));
        if (t < cutoff) ids.push_back(std::move(name));
    }
    return ec && ec != std::errc::no_such_file_or_directory ? ec.value() : 0;
}

} // namespace smx::content
