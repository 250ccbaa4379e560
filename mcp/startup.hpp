// What `smx run` does before it starts a child: the account the children
// run as, the spool and run directories, the pid-file lock, the listeners.
// Each step returns false with a message for the operator in err.
#pragma once

#include "config.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace smx {

// The unprivileged account of [server] user, looked up before fork (the
// child may only make async-signal-safe calls).
struct RunAs {
    std::string name;
    uid_t uid = 0;
    gid_t gid = 0;
    std::vector<gid_t> groups;
};

// Set only when we are root and [server] user is configured.
std::optional<RunAs> lookup_run_as(const sm::Config& cfg, std::string& err);

// spool (cdb/ with 00..FF when hashed, ibdb/, defedb/, quarantine/) and the
// run directory; when run_as is set, hands both trees to that account.
bool make_dirs(const sm::Config& cfg, const std::optional<RunAs>& run_as, std::string& err);

// Gives an existing file (the log file) to the children's account.
bool give_to(const std::string& path, const RunAs& run_as, std::string& err);

// An flock()ed <run_dir>/smx.pid holding our pid: one `smx run` per run
// directory. The file is removed when the lock is released.
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
