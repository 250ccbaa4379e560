// Control requests from the `smx` CLI, and the counters behind `smx stats`
// and the Prometheus endpoint.
#include "qmgr.hpp"

namespace smx::qmgr {

std::vector<std::pair<const char*, std::uint64_t>> Qmgr::metrics() const {
    const IbdbStats& s = ibdb_.stats();
    return {
        {"received", counters_.received},
        {"rejected", counters_.rejected},
        {"tempfailed", counters_.tempfailed},
        {"delivered", counters_.delivered},
        {"deferred", counters_.deferred},
        {"bounced", counters_.bounced},
        {"ibdb_commits", s.commits},
        {"ibdb_transactions", s.transactions},
        {"ibdb_records", s.records},
        {"ibdb_pending", ibdb_.pending()},
        {"ibdb_files_deleted", s.files_deleted},
        {"ibdb_corrupt_records", s.corrupt_records},
        {"fsync_us_total", s.fsync_us_total},
        {"fsync_us_max", s.fsync_us_max},
        {"queue_size", queue_.rcpts()},
        {"queue_transactions", queue_.transactions()},
        {"queue_deferred", queue_.deferred()},
        {"active_deliveries", sched_.active_deliveries()},
        {"destinations", sched_.destinations()},
        {"smtpc_connections", sched_.links()},
        {"smtps_connections", counters_.smtps_connections},
    };
}

sm::msg::CtlReply Qmgr::control(const sm::msg::CtlRequest& req) const {
    if (req.command == "stats") {
        std::string text;
        for (const auto& [name, value] : metrics()) {
            text += name;
            text += ' ';
            text += std::to_string(value);
            text += '\n';
        }
        return {0, std::move(text)};
    }
    return {1, "unknown command \"" + req.command + "\" (this queue manager knows: stats)"};
}

} // namespace smx::qmgr
