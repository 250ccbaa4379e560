#include "log.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <spdlog/async.h>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>

namespace sm {
namespace {

// Lines to a file or stderr. The logging thread only formats a line into a
// buffer: no system call and no thread switch per line (spdlog's async
// logger cost a futex wake and a switch to its thread for each line, a few
// per message). A writer thread writes the buffer out when
// it holds a chunk, on a warning, or every flush_interval, in whole lines,
// several per write(2) but never more than a pipe keeps atomic: all smx
// processes share one stderr or one log file (O_APPEND). A log device that
// stops taking lines stalls the writer; the loggers wait only once
// max_pending bytes are waiting, and then they block rather than lose lines.
class LineSink : public spdlog::sinks::sink {
public:
    explicit LineSink(int fd) : fd_(fd), writer_([this] { run(); }) {}
    ~LineSink() override {
        {
            std::lock_guard lk(mu_);
            stop_ = true;
        }
        wake_.notify_all();
        writer_.join();
        flush();
        if (fd_ > 2) ::close(fd_);
    }

    void log(const spdlog::details::log_msg& msg) override {
        std::unique_lock lk(mu_);
        room_.wait(lk, [this] { return buf_.size() < max_pending || stop_; });
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        buf_.append(line.data(), line.size());
        // One wake per chunk of lines, not per line.
        if ((buf_.size() >= chunk || msg.level >= spdlog::level::warn) && !kicked_) {
            kicked_ = true;
            wake_.notify_one();
        }
    }
    // Everything logged so far, written out before it returns.
    // Bounded, for drain_log: a writer stuck on the device holds write_mu_.
    void flush() override {
        std::unique_lock wl(write_mu_, std::defer_lock);
        if (wl.try_lock_for(std::chrono::seconds(1))) write_pending();
    }
    void set_pattern(const std::string& pattern) override {
        set_formatter(std::make_unique<spdlog::pattern_formatter>(pattern));
    }
    void set_formatter(std::unique_ptr<spdlog::formatter> f) override {
        std::lock_guard lk(mu_);
        formatter_ = std::move(f);
    }

private:
    static constexpr std::size_t chunk = 4096;  // PIPE_BUF
    static constexpr std::size_t max_pending = 1u << 20;
    static constexpr auto flush_interval = std::chrono::milliseconds(250);

    void run() {
        std::unique_lock lk(mu_);
        while (!stop_) {
            wake_.wait_for(lk, flush_interval, [this] { return kicked_ || stop_; });
            lk.unlock();
            flush();
            lk.lock();
        }
    }

    // Takes the pending lines and writes them; write_mu_ held, so that
    // lines leave in the order they were logged.
    void write_pending() {
        {
            std::lock_guard lk(mu_);
            out_.clear();
            std::swap(out_, buf_);
            kicked_ = false;
        }
        room_.notify_all();
        std::size_t off = 0;
        while (off < out_.size()) {
            // Whole lines, at most a chunk (a longer line goes alone).
            const std::string_view rest(out_.data() + off, out_.size() - off);
            std::size_t len = rest.size();
            if (len > chunk) {
                auto nl = rest.substr(0, chunk).rfind('\n');
                if (nl == std::string_view::npos) nl = rest.find('\n');
                if (nl != std::string_view::npos) len = nl + 1;
            }
            const std::size_t end = off + len;
            while (off < end) {
                const ssize_t n = ::write(fd_, out_.data() + off, end - off);
                if (n < 0 && errno == EINTR) continue;
                if (n <= 0) return;  // nowhere left to report it; drop the lines
                off += static_cast<std::size_t>(n);
            }
        }
    }

    const int fd_;
    std::mutex mu_;  // buf_, formatter_, kicked_, stop_
    std::condition_variable wake_, room_;
    std::string buf_;
    std::unique_ptr<spdlog::formatter> formatter_ = std::make_unique<spdlog::pattern_formatter>();
    bool kicked_ = false;
    bool stop_ = false;
    std::timed_mutex write_mu_;  // out_, and the order of writes
    std::string out_;
    std::thread writer_;  // last: started once the members above exist
};

// One datagram per line to a syslog socket (/dev/log: rsyslog, or journald,
// which serves it too), RFC 3164 without a timestamp (the daemon adds its
// own): "<PRI>smx/qmgr[pid]: line", the shape postfix's lines have.
// A syslog daemon that stops reading must not stop the mail: a send waits
// at most a second, and after a line is dropped the next ones do not wait
// until one gets through, which then says how many were lost.
class SyslogSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    SyslogSink(std::string path, int facility) : path_(std::move(path)), facility_(facility) {}
    ~SyslogSink() override {
        if (fd_ >= 0) ::close(fd_);
    }

    // Opens the socket; errno says why when it fails.
    bool connect() {
        if (fd_ >= 0) ::close(fd_);
        fd_ = -1;
        sockaddr_un sa{};
        sa.sun_family = AF_UNIX;
        if (path_.size() >= sizeof sa.sun_path) {
            errno = ENAMETOOLONG;
            return false;
        }
        std::memcpy(sa.sun_path, path_.c_str(), path_.size() + 1);
        const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return false;
        const timeval send_timeout{1, 0};
        if (::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &send_timeout, sizeof send_timeout) != 0 ||
            ::connect(fd, reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0) {
            const int e = errno;
            ::close(fd);
            errno = e;
            return false;
        }
        fd_ = fd;
        return true;
    }

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        if (!send_line(msg.level, std::string_view(line.data(), line.size()))) {
            ++dropped_;
            return;
        }
        if (dropped_ == 0) return;
        const std::string note = std::string(msg.logger_name.data(), msg.logger_name.size()) +
                                 "[" + std::to_string(::getpid()) + "]: " +
                                 std::to_string(dropped_) +
                                 " log lines dropped: the syslog socket did not take them";
        if (send_line(spdlog::level::warn, note)) dropped_ = 0;
    }
    void flush_() override {}

private:
    bool send_line(spdlog::level::level_enum level, std::string_view text) {
        std::string dgram = "<" + std::to_string(facility_ * 8 + severity(level)) + ">";
        dgram += text;
        // Once lines are being dropped, do not wait for the socket again.
        const int flags = dropped_ ? MSG_DONTWAIT : 0;
        if (fd_ >= 0 && ::send(fd_, dgram.data(), dgram.size(), flags) >= 0) return true;
        if (fd_ >= 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
        // The syslog daemon restarted (its socket is a new one): once more.
        return connect() && ::send(fd_, dgram.data(), dgram.size(), flags) >= 0;
    }

    static int severity(spdlog::level::level_enum l) {
        switch (l) {
        case spdlog::level::critical: return 2;
        case spdlog::level::err: return 3;
        case spdlog::level::warn: return 4;
        case spdlog::level::info: return 6;
        default: return 7;
        }
    }

    std::string path_;
    int facility_;
    int fd_ = -1;
    std::uint64_t dropped_ = 0;
};

// The sink of the current logger, for drain_log.
std::shared_ptr<spdlog::sinks::sink> current_sink;

// Not worth dying for: say so where someone will see it.
void say_on_stderr(const std::string& msg) {
    [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
}

// The sink for the configuration; syslog tells whether it is a SyslogSink.
std::shared_ptr<spdlog::sinks::sink> make_sink(const std::string& process, const LogConfig& cfg,
                                               bool& syslog) {
    const std::string who = "smx/" + process + ": ";
    // The pid in the pattern once: spdlog's %P calls getpid(2) for every line.
    const std::string pid = std::to_string(::getpid());
    syslog = false;
    if (!cfg.syslog.empty()) {
        auto sink = std::make_shared<SyslogSink>(cfg.syslog, cfg.syslog_facility);
        if (sink->connect()) {
            sink->set_formatter(std::make_unique<spdlog::pattern_formatter>(
                "%n[" + pid + "]: %v", spdlog::pattern_time_type::local, ""));
            syslog = true;
            return sink;
        }
        say_on_stderr(who + "cannot connect to syslog socket " + cfg.syslog + ": " +
                      std::strerror(errno) + "; logging to stderr\n");
    }
    int fd = 2;
    if (!cfg.file.empty()) {
        fd = ::open(cfg.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (fd < 0) {
            say_on_stderr(who + "cannot open log file " + cfg.file + ": " +
                          std::strerror(errno) + "; logging to stderr\n");
            fd = 2;
        }
    }
    auto sink = std::make_shared<LineSink>(fd);
    sink->set_pattern("%b %d %H:%M:%S.%e %n[" + pid + "]: %v");
    return sink;
}

} // namespace

void drain_log() {
    using namespace std::chrono_literals;
    auto sink = current_sink;
    if (!sink) return;
    // Syslog: the log thread takes lines off the queue and hands them to the
    // sink; once the queue has stayed empty briefly, the sink holds them all.
    if (auto pool = spdlog::thread_pool()) {
        const auto give_up = std::chrono::steady_clock::now() + 1s;
        int empty_polls = 0;
        while (empty_polls < 3 && std::chrono::steady_clock::now() < give_up) {
            empty_polls = pool->queue_size() == 0 ? empty_polls + 1 : 0;
            std::this_thread::sleep_for(5ms);
        }
    }
    sink->flush();
}

void init_logging(const std::string& process, const LogConfig& cfg) {
    spdlog::drop_all();
    bool syslog = false;
    current_sink = make_sink(process, cfg, syslog);
    std::shared_ptr<spdlog::logger> lg;
    if (syslog) {
        // A datagram per line: sent from a log thread with a bounded queue,
        // so that a syslog daemon that stops reading does not stall
        // sessions; overflow blocks rather than losing lines.
        spdlog::init_thread_pool(8192, 1);
        lg = std::make_shared<spdlog::async_logger>("smx/" + process, current_sink,
                                                    spdlog::thread_pool(),
                                                    spdlog::async_overflow_policy::block);
    } else {
        // LineSink does its writing on a thread of its own already.
        lg = std::make_shared<spdlog::logger>("smx/" + process, current_sink);
    }
    lg->set_level(spdlog::level::from_str(cfg.level));
    spdlog::set_default_logger(lg);
}

} // namespace sm
