#include "qmgr/qmgr.hpp"

#include "libsm/await.hpp"
#include "libsm/content_file.hpp"
#include "libsm/domain.hpp"
#include "libsm/ids.hpp"
#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <unordered_set>

namespace smx::qmgr {

namespace {
SchedulerOptions scheduler_options(const smx::Config& cfg) {
    SchedulerOptions o;
    o.initial_concurrency = cfg.client.initial_concurrency;
    o.max_concurrency = cfg.client.max_concurrency;
    // A dead destination is retried when its first deferred mail would be.
    o.dead_time = cfg.queue.retry_min;
    o.rate_limit = cfg.client.rate_limit;
    o.rate_interval = cfg.client.rate_interval;
    return o;
}
} // namespace

Qmgr::Qmgr(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
           Ibdb& ibdb, Defedb& defedb, const smx::Clock& clock)
    : cfg_(cfg), clock_(clock), ex_(ex), workers_(workers), dbq_(workers, defedb), ibdb_(ibdb),
      store_(smx::content::store_for(cfg)), queue_(clock), reaper_(cfg, ex, workers, ibdb),
      sweeper_(cfg, ex, workers, queue_, dbq_, reaper_), segments_(cfg, ex, workers, queue_, ibdb),
      deferred_(cfg, ex, dbq_,
                {[this](auto parks, auto gone) { parked(std::move(parks), std::move(gone)); },
                 [this](auto tas) { got_due(std::move(tas)); },
                 [this] {
                     const std::size_t max = cfg_.queue.aq_max_entries;
                     return queue_.rcpts() < max ? max - queue_.rcpts() : 0;
                 }},
                clock),
      bouncer_(cfg, ex, workers, queue_, ibdb, reaper_,
               {[this](const auto& id, const auto& list) { bounced(id, list); },
                [this](const auto& id, const auto& list, const auto& error) {
                    bounce_failed(id, list, error);
                },
                [this](Ta& dsn) { schedule(dsn, {0}); }},
               clock),
      router_(cfg),
      sched_(ex, queue_, scheduler_options(cfg),
             [this](Ta& ta, std::uint32_t idx, const smx::msg::Reply& why, std::uint64_t until) {
                 defer(ta, idx, {}, why, until);
             },
             clock),
      anvil_(cfg.anvil.rate_time_unit, cfg.anvil.max_clients), space_(cfg), disk_timer_(ex),
      reclaim_timer_(ex) {
    tasks_.spawn(ex_, watch_disk(), "disk watch");
    tasks_.spawn(ex_, reclaim_overdue(), "delivery reclaim");
}

// Checked a few times per limit, at most once a second.
asio::awaitable<void> Qmgr::reclaim_overdue() {
    const auto limit = std::chrono::duration_cast<std::chrono::microseconds>(
        cfg_.queue.max_delivery_time);
    const auto every = std::max<std::chrono::milliseconds>(
        std::chrono::milliseconds(1000),
        std::chrono::duration_cast<std::chrono::milliseconds>(cfg_.queue.max_delivery_time) / 4);
    while (accepting_) {
        for (const auto& [link, da_id] :
             sched_.overdue(clock_.now_us(), static_cast<std::uint64_t>(limit.count()))) {
            spdlog::warn("delivery {} reclaimed: smtpc gave no result within {}s", da_id,
                         cfg_.queue.max_delivery_time.count());
            on_result(link, smx::msg::Result{da_id, {}, {}},
                      {0, "4.4.1", "delivery reclaimed: no result from smtpc in time"});
        }
        reclaim_timer_.expires_after(every);
        auto [ec] = co_await reclaim_timer_.async_wait(smx::await_tuple);
        if (ec) break;  // stop()
    }
}

void Qmgr::stop() {
    accepting_ = false;
    deferred_.stop();
    disk_timer_.cancel();
    sweeper_.stop();
    segments_.stop();
    reclaim_timer_.cancel();
    sched_.stop();
}

bool Qmgr::idle() const {
    return tasks_.idle() && sweeper_.idle() && segments_.idle() && deferred_.idle() &&
           bouncer_.idle();
}

void drain(asio::io_context& io, const Qmgr& q, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    io.restart();
    while (!q.idle()) {
        if (std::chrono::steady_clock::now() > end)
            smx::panic("qmgr: coroutines still running " + std::to_string(limit.count()) +
                      "ms after stop");
        try {
            io.run_one_for(std::chrono::milliseconds(100));
        } catch (...) {
            smx::panic_exception("qmgr drain", std::current_exception());
        }
        if (io.stopped()) io.restart();  // it had no work for a moment
    }
}

void Qmgr::schedule(Ta& ta, const std::vector<std::uint32_t>& idx) {
    // Usually every recipient has the same destination; a linear search over
    // the few groups beats a map here.
    std::vector<std::pair<Destination, std::vector<std::uint32_t>>> groups;
    for (auto i : idx) {
        Routing r = router_.route(ta.rcpt(i).addr(), ta.sender());
        if (r.kind == Routing::Kind::bounce && !cfg_.queue.soft_bounce) {
            auto why = dsn::failed_rcpt(ta.rcpt(i).addr(), std::move(r.reply), {});
            why.last_attempt_us = clock_.now_us();
            bouncer_.bounce(ta, i, {}, std::move(why));
            continue;
        }
        if (r.kind != Routing::Kind::deliver) {
            retry_later(ta, i, {}, std::move(r.reply));
            continue;
        }
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& x) { return x.first.key == r.dest.key; });
        if (g == groups.end()) {
            groups.emplace_back(std::move(r.dest), std::vector<std::uint32_t>{i});
        } else {
            g->second.push_back(i);
        }
    }
    for (auto& [dest, list] : groups) sched_.submit(ta, dest, std::move(list));
}

void Qmgr::start(Ta& ta, const std::vector<std::uint32_t>& idx) {
    if (!ta.env->refused.empty()) {
        // "550 5.7.1 text": the milter's own code and status go in the DSN.
        std::string_view text = ta.env->refused;
        smx::msg::Reply why{550, "5.7.1", {}};
        if (text.size() > 4 && text[0] == '5' && std::isdigit(static_cast<unsigned char>(text[1])) &&
            std::isdigit(static_cast<unsigned char>(text[2])) && text[3] == ' ') {
            why.code = static_cast<std::uint32_t>((text[0] - '0') * 100 + (text[1] - '0') * 10 +
                                                  (text[2] - '0'));
            text.remove_prefix(4);
        }
        auto [enhanced, rest] = smx::smtp::split_enhanced(text);
        if (!enhanced.empty()) why.enhanced = std::string(enhanced);
        why.text = std::string(rest);
        spdlog::info("{}: refused by the milters: {}", ta.id, smx::msg::to_string(why));
        for (auto i : idx) {
            auto failed = dsn::failed_rcpt(ta.rcpt(i).addr(), why, {});
            failed.last_attempt_us = clock_.now_us();
            bouncer_.bounce(ta, i, {}, std::move(failed));
        }
        return;
    }
    if (ta.env->hold.empty()) return schedule(ta, idx);
    spdlog::info("{}: held: {}", ta.id, ta.env->hold);
    for (auto i : idx) park_held(ta, i, {0, {}, "held by access policy: " + ta.env->hold}, {});
}

// Called whenever a recipient closes. Once nothing is open in memory the
// transaction leaves memory; the reaper decides whether its content goes,
// asking DEFEDB (on its strand, after every removal made so far) when DEFEDB
// held some of it.
void Qmgr::check_ta(Ta& ta) {
    if (ta.open() > 0) return;
    const std::string id = ta.id, content = Reaper::file_of(ta);
    const auto verdict = Reaper::verdict(ta);
    sched_.forget(ta);
    queue_.retire(ta);
    switch (verdict) {
    case Reaper::Verdict::keep: return;
    case Reaper::Verdict::now: return reaper_.finish(id, content);
    case Reaper::Verdict::ask_defedb: return deferred_.check(id, content);
    }
}

void Qmgr::parked(std::vector<DeferredQueue::Park> parks, std::vector<DeferredQueue::Check> gone) {
    std::unordered_set<std::string> touched;
    for (const auto& p : parks) {
        if (p.fresh) ibdb_.rcpt_deferred(p.rec.ta_id, p.rec.idx);
        Ta* ta = queue_.find(p.rec.ta_id);
        if (!ta) continue;
        if (ta->deleted()) deferred_.remove(ta->id, p.rec.idx);
        queue_.deferred(*ta, p.rec.idx);
        touched.insert(ta->id);
    }
    for (const auto& id : touched)
        if (Ta* ta = queue_.find(id)) check_ta(*ta);
    // A transaction DEFEDB no longer holds and memory does not either: done.
    for (const auto& c : gone)
        if (!queue_.find(c.ta_id)) reaper_.finish(c.ta_id, c.content_id);
}

void Qmgr::got_due(std::vector<DeferredTa> tas) {
    for (auto& t : tas) {
        Ta* ta = queue_.find(t.envelope.ta_id);
        const bool created = !ta;
        // Only the recipients DEFEDB gave us are ours; the others stay closed.
        if (!ta) ta = queue_.admit_untracked(t.envelope);
        if (ta->deleted()) continue;
        std::vector<std::uint32_t> todo;
        for (const auto& d : t.rcpts) {
            if (d.idx >= ta->rcpts().size()) continue;
            // Still ours from an earlier lease (in flight, being written).
            if (!created && ta->rcpt(d.idx).state() != RcptState::deferred) continue;
            queue_.due(*ta, d.idx, d);
            if (expired(*ta)) {
                bouncer_.bounce(*ta, d.idx, {},
                       dsn::expired_rcpt(ta->rcpt(d.idx).addr(), d.last_reply, d.last_relay,
                                         d.last_attempt_us));
                continue;
            }
            todo.push_back(d.idx);
        }
        if (!todo.empty()) schedule(*ta, todo);
        check_ta(*ta);
    }
}

void Qmgr::bounced(const std::string& ta_id, const std::vector<Bouncer::Bounce>& list) {
    Ta* ta = queue_.find(ta_id);
    if (!ta) return;
    for (const auto& b : list) {
        if (ta->rcpt(b.idx).from_defedb()) deferred_.remove(ta_id, b.idx);
        else if (!ta->deleted()) ibdb_.rcpt_done(ta_id, b.idx);
        queue_.bounced(*ta, b.idx);
    }
    check_ta(*ta);
}

// Without a durable DSN the recipients wait in DEFEDB and fail (and bounce)
// again later.
void Qmgr::bounce_failed(const std::string& ta_id, const std::vector<Bouncer::Bounce>& list,
                         const std::string& error) {
    Ta* ta = queue_.find(ta_id);
    if (!ta) return;
    for (const auto& b : list) {
        queue_.bounce_failed(*ta, b.idx, {0, "4.3.0", error});
        deferred_.park(*ta, b.idx,
                       clock_.now_us() + static_cast<std::uint64_t>(backoff(cfg_.queue, 1).count()));
    }
}

void defedb_fatal(const std::string& what) {
    // Not spdlog::shutdown(): other threads may still be logging.
    smx::fatal("defedb: " + what + "; exiting for recovery");
}

} // namespace smx::qmgr
