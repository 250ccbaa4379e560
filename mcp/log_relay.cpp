#include "mcp/log_relay.hpp"

#include "libsm/log.hpp"
#include "libsm/panic.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smx::mcp {
namespace {
// Room for bursts of the children's lines while the file is slow: their
// loggers block (and lose nothing) only once it is full.
constexpr int pipe_size = 1 << 20;
} // namespace

bool LogRelay::start(std::string& err) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
        err = std::string("log pipe: ") + std::strerror(errno);
        return false;
    }
    read_ = smx::Fd(fds[0]);
    write_ = smx::Fd(fds[1]);
    stop_ = smx::Fd(::eventfd(0, EFD_CLOEXEC));
    if (!stop_ || ::fcntl(read_.get(), F_SETFL, O_NONBLOCK) != 0) {
        err = std::string("log pipe: ") + std::strerror(errno);
        return false;
    }
    // Best effort: an unprivileged smx run may not raise it past
    // /proc/sys/fs/pipe-max-size.
    ::fcntl(write_.get(), F_SETPIPE_SZ, pipe_size);
    thread_ = std::thread([this] { run(); });
    return true;
}

void LogRelay::stop() {
    if (!thread_.joinable()) return;
    const std::uint64_t one = 1;
    if (::write(stop_.get(), &one, sizeof one) != sizeof one)
        smx::panic(std::string("log relay: cannot stop its thread: ") + std::strerror(errno));
    thread_.join();
}

void LogRelay::run() {
    char buf[65536];
    for (bool stopping = false; !stopping;) {
        pollfd p[2] = {{read_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
        if (::poll(p, 2, -1) < 0) {
            if (errno == EINTR) continue;
            smx::panic(std::string("log relay: poll: ") + std::strerror(errno));
        }
        stopping = p[1].revents != 0;
        // Everything there now; on stop, the last lines too.
        for (;;) {
            const ssize_t n = ::read(read_.get(), buf, sizeof buf);
            if (n > 0) pass(buf, static_cast<std::size_t>(n));
            else if (n < 0 && errno == EINTR) continue;
            else break;  // EAGAIN: all read (we hold a writer: never EOF)
        }
    }
    if (!tail_.empty()) smx::write_log_lines(tail_ + "\n");
    tail_.clear();
}

void LogRelay::pass(const char* data, std::size_t n) {
    tail_.append(data, n);
    const std::size_t end = tail_.rfind('\n');
    if (end != std::string::npos) {
        smx::write_log_lines(std::string_view(tail_).substr(0, end + 1));
        tail_.erase(0, end + 1);
    }
    // A child writes whole lines of at most smx::max_log_line; a longer
    // piece without an end is not waited for.
    if (tail_.size() > smx::max_log_line) {
        smx::write_log_lines(tail_ + "\n");
        tail_.clear();
    }
}

} // namespace smx::mcp
