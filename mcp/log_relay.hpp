// The children's log lines when log.file is set: they write them into one
// pipe (SMX_LOG_FD, libsm/log.hpp), and a thread of `smx run` copies them
// into the file with its own lines (smx::write_log_lines). Only `smx run`
// opens the file, and opens it again on SIGHUP or SIGUSR1 (logrotate): a
// child, which runs as another account, can neither reopen, truncate nor
// replace it, and one restarted after a rotation logs where the rest do.
#pragma once

#include "libsm/fd.hpp"

#include <string>
#include <thread>

namespace smx::mcp {

class LogRelay {
public:
    LogRelay() = default;
    LogRelay(const LogRelay&) = delete;
    LogRelay& operator=(const LogRelay&) = delete;
    ~LogRelay() { stop(); }

    // The pipe and the thread that reads it; false with err.
    bool start(std::string& err);
    // The end a child inherits (Launch::log_fd); -1 before start.
    int child_end() const { return write_.get(); }
    // Copies what the pipe still holds, then ends the thread: once no child runs.
    void stop();

private:
    void run();
    // Passes the whole lines of what came; keeps an unfinished last one.
    void pass(const char* data, std::size_t n);

    smx::Fd read_, write_, stop_;  // stop_: an eventfd, written once by stop()
    std::string tail_;            // a line not yet ended
    std::thread thread_;
};

} // namespace smx::mcp
