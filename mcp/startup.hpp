// What `smx run` does before it starts a child besides privsep.hpp's
// accounts and directories: the pid-file lock and the listeners.
// Each step returns false with a message for the operator in err.
#pragma once

#include "config.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace smx {

// An flock()ed <run_dir>/smx.pid holding our pid: one `smx run` per run
// directory. The file is removed when the lock is released. QMGR's account
// may write the run directory, so a symbolic link, a hard link or a file
// of another owner there is refused, never followed.
class PidLock {
public:
    PidLock() = default;
    PidLock(const PidLock&) = delete;
    PidLock& operator=(const PidLock&) = delete;
    ~PidLock();
    bool acquire(const std::string& path, std::string& err);

private:
    std::string path_;
    int fd_ = -1;
};

// Binds and listens on every address (SO_REUSEADDR, backlog 1024). The fds
// are close-on-exec; only smx-smtps gets them, as fds 3, 4, ...
class Listeners {
public:
    Listeners() = default;
    Listeners(const Listeners&) = delete;
    Listeners& operator=(const Listeners&) = delete;
    ~Listeners();
    bool open(const std::vector<sm::HostPort>& addrs, std::string& err);
    const std::vector<int>& fds() const { return fds_; }

private:
    std::vector<int> fds_;
};

} // namespace smx
