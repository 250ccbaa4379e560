#include "qmgr.hpp"

#include "ids.hpp"
#include "panic.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smx::qmgr {

namespace {
SchedulerOptions scheduler_options(const sm::Config& cfg) {
    SchedulerOptions o;
    o.initial_concurrency = cfg.client.initial_concurrency;
    o.max_concurrency = cfg.client.max_concurrency;
    // A dead destination is retried when its first deferred mail would be.
    o.dead_time = cfg.queue.retry_min;
    return o;
}
} // namespace

Qmgr::Qmgr(const sm::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
           Ibdb& ibdb, Defedb& defedb)
    : cfg_(cfg), ex_(ex), workers_(workers), dbq_(ex, workers, defedb), ibdb_(ibdb),
      spool_(cfg.spool_dir_abs()), reaper_(cfg, ex, workers, ibdb),
      sweeper_(cfg, ex, workers, queue_, dbq_, reaper_), router_(cfg),
      sched_(ex, queue_, scheduler_options(cfg),
             [this](Ta& ta, std::uint32_t idx, const std::string& why, std::uint64_t until) {
                 defer(ta, idx, {}, why, until);
             }),
      db_retry_(ex), due_timer_(ex), maint_timer_(ex), disk_timer_(ex), reclaim_timer_(ex) {
    check_disk();
    reclaim_overdue();
}

void Qmgr::reclaim_overdue() {
    const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(
        cfg_.queue.max_delivery_time);
    for (const auto& [link, da_id] :
         sched_.overdue(sm::now_us(), static_cast<std::uint64_t>(limit.count()))) {
        spdlog::warn("delivery {} reclaimed: smtpc gave no result within {}s", da_id,
                     cfg_.queue.max_delivery_time.count());
        on_result(link, sm::msg::Result{da_id, {}, {}},
                  "4.4.1 delivery reclaimed: no result from smtpc in time");
    }
    // Checked a few times per limit, at most once a second.
    reclaim_timer_.expires_after(std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000), std::chrono::duration_cast<std::chrono::milliseconds>(
                                             cfg_.queue.max_delivery_time) / 4));
    reclaim_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) reclaim_overdue();
    });
}

void Qmgr::stop() {
    accepting_ = false;
    due_timer_.cancel();
    maint_timer_.cancel();
    disk_timer_.cancel();
    sweeper_.stop();
    reclaim_timer_.cancel();
    db_retry_.cancel();
}

void Qmgr::schedule(Ta& ta, const std::vector<std::uint32_t>& idx) {
    // Usually every recipient has the same destination; a linear search over
    // the few groups beats a map here.
    std::vector<std::pair<Destination, std::vector<std::uint32_t>>> groups;
    Destination d;
    for (auto i : idx) {
        const std::string domain = domain_of(ta.rcpt(i).addr());
        if (!router_.route(domain, d)) {
            retry_later(ta, i, {}, "no route to " + (domain.empty() ? ta.rcpt(i).addr() : domain));
            continue;
        }
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& x) { return x.first.key == d.key; });
        if (g == groups.end()) {
            groups.emplace_back(d, std::vector<std::uint32_t>{i});
        } else {
            g->second.push_back(i);
        }
    }
    for (auto& [dest, list] : groups) sched_.submit(ta, dest, std::move(list));
}

// Called whenever a recipient closes. Once nothing is open in memory the
// transaction leaves memory; the reaper decides whether its content goes,
// asking DEFEDB (on its strand, after every removal made so far) when DEFEDB
// held some of it.
void Qmgr::check_ta(Ta& ta) {
    if (ta.open() > 0) return;
    const std::string id = ta.id, cdb = ta.cdb_id();
    const auto verdict = Reaper::verdict(ta);
    sched_.forget(ta);
    queue_.retire(ta);
    switch (verdict) {
    case Reaper::Verdict::keep: return;
    case Reaper::Verdict::now: return reaper_.finish(id, cdb);
    case Reaper::Verdict::ask_defedb:
        checks_.push_back(Check{id, cdb});
        return kick_db();
    }
}

void defedb_fatal(const std::string& what) {
    // Not spdlog::shutdown(): other threads may still be logging.
    sm::fatal("defedb: " + what + "; exiting for recovery");
}

} // namespace smx::qmgr
