// What `smx run` does before it starts a child besides privsep.hpp's
// accounts and directories: the pid-file lock and the listeners.
// Each step returns false with a message for the operator in err.
#pragma once

#include "libsm/config.hpp"

#include <sys/types.h>

#include <string>
#include <vector>

namespace smx::mcp {

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

// Every address bound once per SMTPS event loop (smx::listen_all: one
// SO_REUSEPORT group per address), held until the MCP exits so that no
// connection queued on them is lost while SMTPS restarts. The fds are
// close-on-exec; only smx-smtps gets them, as fds 3, 4, ...
class Listeners {
public:
    Listeners() = default;
    Listeners(const Listeners&) = delete;
    Listeners& operator=(const Listeners&) = delete;
    ~Listeners();
    bool open(const std::vector<smx::HostPort>& addrs, unsigned loops, std::string& err);
    // Loop by loop, as smx::listen_all orders them.
    const std::vector<int>& fds() const { return fds_; }
    unsigned loops() const { return loops_; }

private:
    std::vector<int> fds_;
    unsigned loops_ = 0;
};

} // namespace smx::mcp
