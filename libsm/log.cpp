#include "libsm/log.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <mutex>
#include <thread>
#include <spdlog/async.h>
#include <spdlog/sinks/base_sink.h>

namespace smx {
namespace {

using spdlog::level::level_enum;

// The severity of RFC 5424 and sd-daemon(3) for a level.
int severity(level_enum l) {
    switch (l) {
    case spdlog::level::critical: return 2;
    case spdlog::level::err: return 3;
    case spdlog::level::warn: return 4;
    case spdlog::level::info: return 6;
    default: return 7;
    }
}

// What postfix puts before the text of a line of each level.
std::string_view level_prefix(const spdlog::details::log_msg& msg) {
    switch (msg.level) {
    case spdlog::level::warn: return "warning: ";
    case spdlog::level::err: return "error: ";
    case spdlog::level::critical: {
        // smx::panic and smx::fatal say which they are.
        const std::string_view text(msg.payload.data(), msg.payload.size());
        return text.starts_with("panic: ") || text.starts_with("fatal: ") ? "" : "fatal: ";
    }
    default: return "";
    }
}

// The host name as syslog daemons write it: up to the first dot.
std::string short_hostname() {
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) return "localhost";
    std::string h(name);
    if (const auto dot = h.find('.'); dot != std::string::npos && dot > 0) h.resize(dot);
    return h;
}

// True when standard error is the journal's stream (systemd sets
// JOURNAL_STREAM to its device and inode; a redirected stderr is not).
bool stderr_is_journal() {
    const char* v = std::getenv("JOURNAL_STREAM");
    unsigned long long dev = 0, ino = 0;
    struct stat st{};
    return v && std::sscanf(v, "%llu:%llu", &dev, &ino) == 2 && ::fstat(2, &st) == 0 &&
           st.st_dev == dev && st.st_ino == ino;
}

// The shape of a line for where it goes (log.hpp).
enum class Shape {
    file,     // "Nov  4 21:00:00 host smx/qmgr[123]: text\n"
    journal,  // "<6>smx/qmgr[123]: text\n"
    syslog,   // "smx/qmgr[123]: text" (the sink adds "<PRI>")
};

class LineFormatter final : public spdlog::formatter {
public:
    LineFormatter(Shape shape, std::string host)
        : shape_(shape), host_(std::move(host)), pid_(std::to_string(::getpid())) {}

    void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
        const std::size_t start = dest.size();
        if (shape_ == Shape::file) {
            add(dest, stamp(msg.time));
            add(dest, " ");
            add(dest, host_);
            add(dest, " ");
        } else if (shape_ == Shape::journal) {
            add(dest, "<");
            dest.push_back(static_cast<char>('0' + severity(msg.level)));
            add(dest, ">");
        }
        add(dest, std::string_view(msg.logger_name.data(), msg.logger_name.size()));
        add(dest, "[");
        add(dest, pid_);
        add(dest, "]: ");
        add(dest, level_prefix(msg));
        // A client's bytes are logged: no control character (a newline
        // would forge a line) goes out, as postfix's printable() does.
        for (const char c : std::string_view(msg.payload.data(), msg.payload.size()))
            dest.push_back(static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c);
        const std::size_t eol = shape_ == Shape::syslog ? 0 : 1;
        if (dest.size() - start + eol > max_log_line) {
            dest.resize(start + max_log_line - eol - 3);
            add(dest, "...");
        }
        if (eol) dest.push_back('\n');
    }
    std::unique_ptr<spdlog::formatter> clone() const override {
        return std::make_unique<LineFormatter>(*this);
    }

private:
    static void add(spdlog::memory_buf_t& dest, std::string_view s) {
        dest.append(s.data(), s.data() + s.size());
    }
    // Local time to the second, as syslog writes it ("Nov  4 21:00:00"):
    // made once a second.
    std::string_view stamp(spdlog::log_clock::time_point t) {
        const std::time_t s = spdlog::log_clock::to_time_t(t);
        if (s != stamp_of_) {
            std::tm tm{};
            ::localtime_r(&s, &tm);
            char buf[32];
            stamp_.assign(buf, std::strftime(buf, sizeof buf, "%b %e %H:%M:%S", &tm));
            stamp_of_ = s;
        }
        return stamp_;
    }

    Shape shape_;
    std::string host_;
    std::string pid_;  // once: spdlog's %P calls getpid(2) for every line
    std::time_t stamp_of_ = -1;
    std::string stamp_;
};

// Lines to a file, a pipe or stderr. The logging thread only formats a line into a
// buffer: no system call and no thread switch per line (spdlog's async
// logger cost a futex wake and a switch to its thread for each line, a few
// per message). A writer thread writes the buffer out when
// it holds a chunk, on a warning, or every flush_interval, in whole lines,
// several per write(2) but never more than a pipe keeps atomic: the
// children of `smx run` share one pipe, and all processes one stderr. A log device that
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
    // Whole lines formatted elsewhere (a child's), written with ours.
    void append(std::string_view lines) {
        std::unique_lock lk(mu_);
        room_.wait(lk, [this] { return buf_.size() < max_pending || stop_; });
        buf_.append(lines);
        if (buf_.size() >= chunk && !kicked_) {
            kicked_ = true;
            wake_.notify_one();
        }
    }
    // The lines from now on go to fd, the one before is closed.
    void replace_fd(int fd) {
        std::lock_guard wl(write_mu_);
        if (fd_ > 2) ::close(fd_);
        fd_ = fd;
    }
    // Everything logged so far, written out before it returns.
    // Bounded, for drain_log: a writer stuck on the device holds write_mu_.
    void flush() override {
        std::unique_lock wl(write_mu_, std::defer_lock);
        if (wl.try_lock_for(std::chrono::seconds(1))) write_pending();
    }
    // Not used: a LineSink takes a LineFormatter.
    void set_pattern(const std::string&) override {}
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

    int fd_;  // write_mu_
    std::mutex mu_;  // buf_, formatter_, kicked_, stop_
    std::condition_variable wake_, room_;
    std::string buf_;
    std::unique_ptr<spdlog::formatter> formatter_;
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
                                 "[" + std::to_string(::getpid()) + "]: warning: " +
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

    std::string path_;
    int facility_;
    int fd_ = -1;
    std::uint64_t dropped_ = 0;
};

// The sink of the current logger, for drain_log; and the loggers of
// log_as (created with the default one).
std::shared_ptr<spdlog::sinks::sink> current_sink;
std::shared_ptr<spdlog::logger> aside[2];

// Not worth dying for: say so where someone will see it.
void say_on_stderr(const std::string& msg) {
    [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
}

// The pipe `smx run` handed this process for its lines (SMX_LOG_FD), or -1.
int inherited_log_fd(const std::string& who) {
    const char* v = std::getenv(log_fd_env);
    if (!v || !*v) return -1;
    char* end = nullptr;
    const long fd = std::strtol(v, &end, 10);
    struct stat st{};
    if (*end || fd < 3 || fd > INT_MAX || ::fstat(static_cast<int>(fd), &st) != 0 ||
        !S_ISFIFO(st.st_mode)) {
        say_on_stderr(who + log_fd_env + "=" + v + " is not a pipe from smx run; ignored\n");
        return -1;
    }
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return static_cast<int>(fd);
}

// The sink for the configuration; syslog tells whether it is a SyslogSink.
std::shared_ptr<spdlog::sinks::sink> make_sink(const std::string& process, const LogConfig& cfg,
                                               int file, bool& syslog) {
    const std::string who = cfg.syslog_name + "/" + process + ": ";
    const std::string host = short_hostname();
    syslog = false;
    if (!cfg.syslog.empty()) {
        auto sink = std::make_shared<SyslogSink>(cfg.syslog, cfg.syslog_facility);
        if (sink->connect()) {
            sink->set_formatter(std::make_unique<LineFormatter>(Shape::syslog, host));
            syslog = true;
            return sink;
        }
        say_on_stderr(who + "cannot connect to syslog socket " + cfg.syslog + ": " +
                      std::strerror(errno) + "; logging to stderr\n");
    }
    int fd = 2;
    if (!cfg.file.empty()) {
        std::string err;
        if (file >= 0) fd = file;
        else if (const int inherited = inherited_log_fd(who); inherited >= 0) fd = inherited;
        else if ((fd = open_log_file(cfg.file, err)) < 0) {
            say_on_stderr(who + err + "; logging to stderr\n");
            fd = 2;
        }
    }
    auto sink = std::make_shared<LineSink>(fd);
    sink->set_formatter(std::make_unique<LineFormatter>(
        fd == 2 && stderr_is_journal() ? Shape::journal : Shape::file, host));
    return sink;
}

LineSink* line_sink() { return dynamic_cast<LineSink*>(current_sink.get()); }

} // namespace

int open_log_file(const std::string& path, std::string& err) {
    // Non-blocking: a FIFO put at the path must not hang the open.
    constexpr int flags = O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC;
    const int fd = ::open(path.c_str(), flags, 0640);
    struct stat st{};
    if (fd < 0 || ::fstat(fd, &st) != 0) {
        err = errno == ELOOP ? "log file " + path + " is a symbolic link; refusing to use it"
                             : "cannot open log file " + path + ": " + std::strerror(errno);
        if (fd >= 0) ::close(fd);
        return -1;
    }
    if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
        err = "log file " + path + " is not a regular file with one link; refusing to use it";
        ::close(fd);
        return -1;
    }
    ::fcntl(fd, F_SETFL, O_WRONLY | O_APPEND);
    return fd;
}

bool reopen_log_file(const std::string& path, std::string& err) {
    LineSink* sink = line_sink();
    if (!sink) return true;  // syslog: nothing of ours to reopen
    const int fd = open_log_file(path, err);
    if (fd < 0) return false;
    sink->replace_fd(fd);
    return true;
}

void write_log_lines(std::string_view lines) {
    if (LineSink* sink = line_sink()) sink->append(lines);
}

spdlog::logger& log_as(LogAs who) {
    // Before init_logging (unit tests): the default logger.
    const auto& lg = aside[static_cast<int>(who)];
    return lg ? *lg : *spdlog::default_logger();
}

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

void init_logging(const std::string& process, const LogConfig& cfg, int file) {
    spdlog::drop_all();
    for (auto& a : aside) a.reset();
    ::tzset();  // localtime_r needs it, and does not call it itself
    bool syslog = false;
    current_sink = make_sink(process, cfg, file, syslog);
    if (syslog) {
        // A datagram per line: sent from a log thread with a bounded queue,
        // so that a syslog daemon that stops reading does not stall
        // sessions; overflow blocks rather than losing lines.
        spdlog::init_thread_pool(8192, 1);
    }
    auto make = [&](const std::string& name) -> std::shared_ptr<spdlog::logger> {
        std::shared_ptr<spdlog::logger> lg;
        if (syslog)
            lg = std::make_shared<spdlog::async_logger>(cfg.syslog_name + "/" + name, current_sink,
                                                        spdlog::thread_pool(),
                                                        spdlog::async_overflow_policy::block);
        else  // LineSink does its writing on a thread of its own already.
            lg = std::make_shared<spdlog::logger>(cfg.syslog_name + "/" + name, current_sink);
        lg->set_level(spdlog::level::from_str(cfg.level));
        return lg;
    };
    spdlog::set_default_logger(make(process));
    // Registered: spdlog::set_level (a reload) sets their level too.
    for (auto [who, name] :
         {std::pair{LogAs::cleanup, "cleanup"}, std::pair{LogAs::bounce, "bounce"}}) {
        if (name == process) continue;
        aside[static_cast<int>(who)] = make(name);
        spdlog::register_logger(aside[static_cast<int>(who)]);
    }
}

} // namespace smx
