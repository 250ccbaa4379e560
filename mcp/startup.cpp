#include "mcp/startup.hpp"

#include "libsm/listen.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace smx::mcp {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

} // namespace

PidLock::~PidLock() {
    if (fd_ < 0) return;
    // Unlink while still holding the lock: a new smx run can not lock the
    // old inode in between.
    ::unlink(path_.c_str());
    ::close(fd_);
}

bool PidLock::acquire(const std::string& path, std::string& err) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = errno == ELOOP ? path + " is a symbolic link; refusing to follow it (remove it)"
                             : "cannot open " + path + ": " + errno_text();
        return false;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1 ||
        st.st_uid != ::geteuid()) {
        err = path + " is not a regular file of ours with one link; refusing to use it "
                     "(remove it)";
        ::close(fd);
        return false;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const bool busy = errno == EWOULDBLOCK;
        err = busy ? "another smx run is using " + fs::path(path).parent_path().string()
                   : "cannot lock " + path + ": " + errno_text();
        char buf[32] = {};
        if (busy && ::read(fd, buf, sizeof buf - 1) > 0)
            err += " (pid " + std::string(buf, std::strcspn(buf, "\n")) + ")";
        ::close(fd);
        return false;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
        err = "cannot write " + path + ": " + errno_text();
        ::close(fd);
        return false;
    }
    path_ = path;
    fd_ = fd;
    return true;
}

Listeners::~Listeners() {
    for (int fd : fds_) ::close(fd);
}

bool Listeners::open(const std::vector<smx::HostPort>& addrs, unsigned loops, std::string& err) {
    loops_ = loops;
    return smx::listen_all(addrs, loops, fds_, err);
}

} // namespace smx::mcp
