#include "log.hpp"

#include <spdlog/async.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_sinks.h>

namespace sm {

void init_logging(const std::string& process, const LogConfig& cfg) {
    spdlog::drop_all();
    std::shared_ptr<spdlog::logger> lg;
    // Async with a bounded queue: a slow log device must not stall sessions,
    // and overflow blocks rather than losing lines.
    spdlog::init_thread_pool(8192, 1);
    if (cfg.file.empty()) {
        lg = spdlog::create_async<spdlog::sinks::stderr_sink_mt>("smx/" + process);
    } else {
        lg = spdlog::create_async<spdlog::sinks::basic_file_sink_mt>("smx/" + process, cfg.file);
    }
    lg->set_pattern("%b %d %H:%M:%S.%e %n[%P]: %v");
    lg->set_level(spdlog::level::from_str(cfg.level));
    lg->flush_on(spdlog::level::warn);
    spdlog::set_default_logger(lg);
    spdlog::flush_every(std::chrono::seconds(1));
}

} // namespace sm
