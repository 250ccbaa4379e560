#include "log.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>
#include <thread>
#include <spdlog/async.h>
#include <spdlog/sinks/base_sink.h>

namespace sm {
namespace {

// Writes whole lines only, several per write(2) but never more than a pipe
// guarantees to keep atomic: all smx processes share one stderr or one log
// file (O_APPEND), and stdio's 4 KiB chunks would cut lines in the middle.
class LineSink : public spdlog::sinks::base_sink<std::mutex> {
public:
    explicit LineSink(int fd) : fd_(fd) {}
    ~LineSink() override {
        write_out();
        if (fd_ > 2) ::close(fd_);
    }

protected:
    void sink_it_(const spdlog::details::log_msg& msg) override {
        spdlog::memory_buf_t line;
        formatter_->format(msg, line);
        if (buf_.size() + line.size() > chunk) write_out();
        buf_.append(line.data(), line.size());
    }
    void flush_() override { write_out(); }

private:
    static constexpr std::size_t chunk = 4096;  // PIPE_BUF

    void write_out() {
        std::size_t off = 0;
        while (off < buf_.size()) {
            const ssize_t n = ::write(fd_, buf_.data() + off, buf_.size() - off);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;  // nowhere left to report it; drop the lines
            off += static_cast<std::size_t>(n);
        }
        buf_.clear();
    }

    int fd_;
    std::string buf_;
};

// The sink of the current logger, for drain_log.
std::shared_ptr<LineSink> current_sink;

} // namespace

void drain_log() {
    using namespace std::chrono_literals;
    auto sink = current_sink;
    auto pool = spdlog::thread_pool();
    if (!sink || !pool) return;
    // The log thread takes lines off the queue and hands them to the sink;
    // once the queue has stayed empty briefly, the sink holds them all.
    const auto give_up = std::chrono::steady_clock::now() + 1s;
    int empty_polls = 0;
    while (empty_polls < 3 && std::chrono::steady_clock::now() < give_up) {
        empty_polls = pool->queue_size() == 0 ? empty_polls + 1 : 0;
        std::this_thread::sleep_for(5ms);
    }
    sink->flush();
}

void init_logging(const std::string& process, const LogConfig& cfg) {
    spdlog::drop_all();
    int fd = 2;
    if (!cfg.file.empty()) {
        fd = ::open(cfg.file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (fd < 0) {
            // Not worth dying for: say so where someone will see it.
            const std::string msg = "smx/" + process + ": cannot open log file " + cfg.file +
                                    ": " + std::strerror(errno) + "; logging to stderr\n";
            [[maybe_unused]] auto n = ::write(2, msg.data(), msg.size());
            fd = 2;
        }
    }
    // Async with a bounded queue: a slow log device must not stall sessions,
    // and overflow blocks rather than losing lines.
    spdlog::init_thread_pool(8192, 1);
    current_sink = std::make_shared<LineSink>(fd);
    auto lg = std::make_shared<spdlog::async_logger>(
        "smx/" + process, current_sink, spdlog::thread_pool(),
        spdlog::async_overflow_policy::block);
    lg->set_pattern("%b %d %H:%M:%S.%e %n[%P]: %v");
    lg->set_level(spdlog::level::from_str(cfg.level));
    lg->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(lg);
    spdlog::flush_every(std::chrono::seconds(1));
}

} // namespace sm
