#include "config_reload.hpp"

#include <spdlog/spdlog.h>

#include <csignal>

namespace sm {
namespace {

// Compares one key and keeps its running value; the names collect in out.
class Keeper {
public:
    Keeper(std::vector<std::string>& out) : out_(out) {}
    template <class T, class Eq = std::equal_to<T>>
    void keep(const char* key, const T& running, T& next, Eq eq = {}) {
        if (eq(running, next)) return;
        out_.push_back(key);
        next = running;
    }

private:
    std::vector<std::string>& out_;
};

bool same_listen(const std::vector<HostPort>& a, const std::vector<HostPort>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (a[i].str() != b[i].str()) return false;
    return true;
}

} // namespace

std::vector<std::string> keep_restart_only(const Config& r, Config& n) {
    std::vector<std::string> out;
    Keeper k(out);
    // SMTPS serves the sockets the MCP bound; the accounts are set at fork.
    k.keep("server.listen", r.server.listen, n.server.listen, same_listen);
    k.keep("server.threads", r.server.threads, n.server.threads);
    k.keep("server.processes", r.server.processes, n.server.processes);
    k.keep("server.user", r.server.user, n.server.user);
    k.keep("server.smtps_user", r.server.smtps_user, n.server.smtps_user);
    k.keep("server.qmgr_user", r.server.qmgr_user, n.server.qmgr_user);
    k.keep("server.smtpc_user", r.server.smtpc_user, n.server.smtpc_user);
    k.keep("server.group", r.server.group, n.server.group);
    // The maildrop's group, given at start.
    k.keep("server.maildrop_group", r.server.maildrop_group, n.server.maildrop_group);
    // QMGR checks these groups when it opens its socket.
    k.keep("server.admin_group", r.server.admin_group, n.server.admin_group);
    k.keep("server.stats_group", r.server.stats_group, n.server.stats_group);
    // QMGR's DSNs name it; one name for the whole relay.
    k.keep("server.hostname", r.server.hostname, n.server.hostname);
    // QMGR's parts (IBDB, DEFEDB, scheduler, sweeper, bouncer) take these
    // at start.
    const QueueConfig& rq = r.queue;
    QueueConfig& nq = n.queue;
    k.keep("queue.spool_dir", rq.spool_dir, nq.spool_dir);
    k.keep("queue.run_dir", rq.run_dir, nq.run_dir);
    k.keep("queue.content_dir", rq.content_dir, nq.content_dir);
    k.keep("queue.ibdb_dir", rq.ibdb_dir, nq.ibdb_dir);
    k.keep("queue.commit_policy", rq.commit_adaptive, nq.commit_adaptive);
    k.keep("queue.commit_interval", rq.commit_interval, nq.commit_interval);
    k.keep("queue.commit_max_batch", rq.commit_max_batch, nq.commit_max_batch);
    k.keep("queue.ibdb_file_size", rq.ibdb_file_size, nq.ibdb_file_size);
    k.keep("queue.cdb_hashed", rq.cdb_hashed, nq.cdb_hashed);
    // SMTPS and QMGR must agree on who syncs content.
    k.keep("queue.content_sync", rq.content_sync, nq.content_sync);
    k.keep("queue.test_no_sync", rq.test_no_sync, nq.test_no_sync);
    k.keep("queue.aq_max_entries", rq.aq_max_entries, nq.aq_max_entries);
    k.keep("queue.retry_min", rq.retry_min, nq.retry_min);
    k.keep("queue.retry_max", rq.retry_max, nq.retry_max);
    k.keep("queue.max_queue_lifetime", rq.max_queue_lifetime, nq.max_queue_lifetime);
    k.keep("queue.min_free_space", rq.min_free_space, nq.min_free_space);
    k.keep("queue.orphan_age", rq.orphan_age, nq.orphan_age);
    k.keep("queue.delay_warning_time", rq.delay_warning_time, nq.delay_warning_time);
    k.keep("queue.max_delivery_time", rq.max_delivery_time, nq.max_delivery_time);
    k.keep("queue.soft_bounce", rq.soft_bounce, nq.soft_bounce);
    k.keep("queue.bounce_untrusted", rq.bounce_untrusted, nq.bounce_untrusted);
    // The scheduler's windows and SMTPC's resolver are set up at start.
    k.keep("client.initial_concurrency", r.client.initial_concurrency,
           n.client.initial_concurrency);
    k.keep("client.max_concurrency", r.client.max_concurrency, n.client.max_concurrency);
    k.keep("client.dns_servers", r.client.dns_servers, n.client.dns_servers);
    k.keep("client.smtp_port", r.client.smtp_port, n.client.smtp_port);
    // The log sink and the metrics listener are opened at start.
    k.keep("log.file", r.log.file, n.log.file);
    k.keep("log.syslog", r.log.syslog, n.log.syslog);
    k.keep("log.syslog_facility", r.log.syslog_facility, n.log.syslog_facility);
    k.keep("stats.listen", r.stats.listen, n.stats.listen);
    return out;
}

sigset_t reload_signals() {
    sigset_t s;
    ::sigemptyset(&s);
    ::sigaddset(&s, SIGHUP);
    return s;
}

void set_log_level(const LogConfig& cfg) {
    spdlog::default_logger()->set_level(spdlog::level::from_str(cfg.level));
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

} // namespace sm
