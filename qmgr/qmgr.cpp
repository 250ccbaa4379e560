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
    : cfg_(cfg), ex_(ex), workers_(workers), dbq_(asio::make_strand(workers.get_executor())),
      ibdb_(ibdb), defedb_(defedb), spool_(cfg.spool_dir_abs()), router_(cfg),
      sched_(ex, queue_, scheduler_options(cfg),
             [this](Ta& ta, std::uint32_t idx, const std::string& why, std::uint64_t until) {
                 defer(ta, idx, {}, why, until);
             }),
      db_retry_(ex), due_timer_(ex), maint_timer_(ex), disk_timer_(ex),
      sweep_timer_(ex), reclaim_timer_(ex) {
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
    sweep_timer_.cancel();
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
// transaction leaves memory; its content goes when no envelope names it:
// at once when DEFEDB never saw it, else after DEFEDB says it holds nothing
// more of it (asked on the DEFEDB strand, after every removal made so far).
void Qmgr::check_ta(Ta& ta) {
    if (ta.open() > 0) return;
    const std::string id = ta.id, cdb = ta.cdb_id();
    const bool parked = std::any_of(ta.rcpts().begin(), ta.rcpts().end(), [](const Rcpt& r) {
        return r.state() == RcptState::deferred;
    });
    const bool deleted = ta.deleted(), touched = ta.touched_defedb();
    sched_.forget(ta);
    queue_.retire(ta);
    if (deleted || parked) return;
    if (!touched) {
        finish_ta(id, cdb);
        return;
    }
    checks_.push_back(Check{id, cdb});
    kick_db();
}

// Every recipient is final: the envelope is done and the content can go.
void Qmgr::finish_ta(const std::string& id, const std::string& cdb_id) {
    drop_ta(id, cdb_id);
    spdlog::info("{}: removed", id);
}

// The content goes once the ta_done record is written: a QMGR killed
// before that must not find the envelope without its content. A sweep
// running meanwhile must not take the file for an orphan.
void Qmgr::drop_ta(const std::string& id, const std::string& cdb_id) {
    if (sweeping_) unlinked_in_sweep_.insert(cdb_id);
    ibdb_.ta_done(id, [this, cdb_id] { unlink_later(cdb_id); });
}

// Unlinks run on the worker pool: removing the files cost as much as the
// whole run in the sendmail X measurements.
void Qmgr::unlink_later(const std::string& cdb_id) {
    if (sweeping_) unlinked_in_sweep_.insert(cdb_id);
    unlinks_.push_back(sm::cdb_path(spool_, cdb_id, cfg_.queue.cdb_hashed));
    if (unlinks_.size() > 1) return;
    asio::post(ex_, [this] {
        asio::post(workers_, [paths = std::move(unlinks_)] {
            for (const auto& p : paths)
                if (::unlink(p.c_str()) != 0 && errno != ENOENT)
                    spdlog::error("unlink {}: {}", p, std::strerror(errno));
        });
        unlinks_.clear();
    });
}

void defedb_fatal(const std::string& what) {
    // Not spdlog::shutdown(): other threads may still be logging.
    sm::fatal("defedb: " + what + "; exiting for recovery");
}

} // namespace smx::qmgr
