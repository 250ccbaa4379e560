#include "libsm/config_reload.hpp"

#include "libsm/config_keys.hpp"

#include <spdlog/spdlog.h>

#include <csignal>

namespace smx {

std::vector<std::string> keep_restart_only(const Config& running, Config& next) {
    std::vector<std::string> kept;
    for (const auto& k : config_keys()) {
        if (k.reload != Reload::restart || k.member.show(running) == k.member.show(next)) continue;
        k.member.copy(running, next);
        kept.push_back(k.name);
    }
    return kept;
}

sigset_t reload_signals() {
    sigset_t s;
    ::sigemptyset(&s);
    ::sigaddset(&s, SIGHUP);
    return s;
}

void set_log_level(const LogConfig& cfg) {
    // Every registered logger: smx::log_as's too.
    spdlog::set_level(spdlog::level::from_str(cfg.level));
}

ConfigReloader::ConfigReloader(boost::asio::io_context& io, std::string path,
                               const Config& running, Apply apply)
    : hup_(io, SIGHUP), path_(std::move(path)), running_(running), apply_(std::move(apply)) {
    wait();
    // One that came during the start-up is taken now.
    const sigset_t hup = reload_signals();
    ::pthread_sigmask(SIG_UNBLOCK, &hup, nullptr);
}

void ConfigReloader::stop() {
    boost::system::error_code ec;
    hup_.cancel(ec);
}

void ConfigReloader::wait() {
    hup_.async_wait([this](boost::system::error_code ec, int) {
        if (ec) return;
        reload();
        wait();
    });
}

void ConfigReloader::reload() {
    const std::string from = path_.empty() ? "the built-in defaults" : path_;
    Config next;
    std::vector<std::string> kept;
    try {
        next = load_config(path_);
        kept = keep_restart_only(running_, next);
        apply_(next);
    } catch (const std::exception& e) {
        spdlog::error("reload: config error: {}; keeping the running configuration", e.what());
        return;
    }
    set_log_level(next.log);
    running_ = std::move(next);
    std::string names;
    for (const auto& k : kept) names += (names.empty() ? "" : ", ") + k;
    if (kept.empty()) spdlog::info("config reloaded from {}", from);
    else spdlog::info("config reloaded from {}; until a restart keeping {}", from, names);
}

} // namespace smx
