// Control requests from the `smx` CLI (stats, flush, hold, release, delete;
// queue, qshape, show and requeue are in queue_report.cpp), and the counters
// behind `smx stats` and the Prometheus endpoint. Requests are taken on the
// event loop; each that needs DEFEDB is a coroutine that awaits its work on
// the DEFEDB strand, then replies.
#include "qmgr.hpp"

#include "ids.hpp"
#include "quarantine.hpp"

#include <spdlog/spdlog.h>

#include <memory>

namespace smx::qmgr {

std::vector<Metric> Qmgr::metrics() const {
    const IbdbStats& s = ibdb_.stats();
    const sm::msg::SmtpsLoad smtps = smtps_loads_.total();
    return {
        {"received", counters_.received, true, "Transactions accepted (TA_COMMIT acknowledged)"},
        {"commit_rejected", counters_.rejected, true, "TA_COMMITs refused as invalid"},
        {"commit_tempfailed", counters_.tempfailed, true, "TA_COMMITs refused for now (queue full, I/O error)"},
        {"delivered", counters_.delivered, true, "Recipients delivered (status=sent)"},
        {"deferred", counters_.deferred, true, "Recipient deferrals (status=deferred)"},
        {"bounced", bouncer_.bounced(), true, "Recipients bounced"},
        {"dsn_sent", bouncer_.dsn_sent(), true, "Delivery status notifications queued"},
        {"quarantined", counters_.quarantined + sweeper_.quarantined() + deferred_.quarantined(), true, "Files and records moved to quarantine/"},
        {"quarantine_write_failures", quarantine_write_failures(), true, "Copies to quarantine/ that could not be written"},
        {"content_segments_removed", segments_.removed(), true, "Content segments removed once nothing named them"},
        {"ibdb_commits", s.commits, true, "Envelope-log group commits"},
        {"ibdb_transactions", s.transactions, true, "Transactions in envelope-log group commits"},
        {"ibdb_records", s.records, true, "Envelope-log records written"},
        {"ibdb_pending", ibdb_.pending(), false, "Envelope-log records waiting for their commit"},
        {"ibdb_files_deleted", s.files_deleted, true, "Envelope-log files removed"},
        {"ibdb_corrupt_records", s.corrupt_records, true, "Corrupt envelope-log records seen at start-up"},
        {"ibdb_write_failures", s.write_failures, true, "Failed envelope-log writes (each retried)"},
        {"fsync_seconds", s.fsync_us_total, true, "Seconds spent in group-commit syncs (content syncfs and/or envelope-log fdatasync)", 1e-6},
        {"fsync_seconds_max", s.fsync_us_max, false, "Longest group-commit sync, seconds", 1e-6},
        {"queue_size", queue_.rcpts(), false, "Open recipients in the active queue"},
        {"queue_transactions", queue_.transactions(), false, "Transactions in the active queue"},
        {"queue_deferred", deferred_.count(), false, "Recipients in the deferred queue (DEFEDB)"},
        {"active_deliveries", sched_.active_deliveries(), false, "Deliveries out to SMTPC"},
        {"destinations", sched_.destinations(), false, "Destination queues"},
        {"dead_destinations", sched_.dead_destinations(), false,
         "Destinations suspended after a cohort of connection failures"},
        {"smtpc_connections", sched_.links(), false, "SMTPC processes connected"},
        {"smtps_connections", smtps_loads_.links(), false, "SMTPS links connected (one per smx-smtps event loop)"},
        {"smtps_sessions", smtps.sessions, false, "SMTP connections SMTPS serves (reported each second)"},
        {"smtps_transactions", smtps.transactions, false,
         "SMTP transactions open in SMTPS, MAIL to the reply after the content (reported each second)"},
        {"smtps_transactions_waiting", smtps.waiting, false,
         "MAIL commands waiting for server.max_transactions (reported each second)"},
    };
}

void Qmgr::control(const sm::msg::CtlRequest& req, CtlDone done) {
    const auto& c = req.command;
    const bool with_id = c == "hold" || c == "release" || c == "delete";
    if (with_id && (req.args.size() != 1 || !sm::valid_ta_id(req.args[0]))) {
        done({1, req.args.size() == 1 ? "no such queue id" : "usage: " + c + " QUEUE-ID"});
        return;
    }
    if (c == "stats") {
        std::string text;
        for (const Metric& m : metrics()) text += fmt::format("{} {}\n", m.name, m.shown());
        // The refusals: their sum, then each reason and class seen.
        const auto rejected = smtps_loads_.rejected().entries();
        std::uint64_t total = 0;
        for (const auto& e : rejected) total += e.n;
        text += fmt::format("rejected {}\n", total);
        for (const auto& e : rejected)
            text += fmt::format("rejected_{}xx_{} {}\n", e.reply_class,
                                sm::rejection_name(e.reason), e.n);
        for (const auto& [loop, n] : smtps_sessions_by_loop())
            text += fmt::format("smtps_loop_{}_sessions {}\n", loop, n);
        done({0, std::move(text)});
    } else if (c == "queue" || c == "qshape" || c == "show") {
        tasks_.spawn(ex_, ctl_report(req, std::move(done)), "smx queue");
    } else if (c == "requeue") {
        tasks_.spawn(ex_, ctl_requeue(req, std::move(done)), "smx requeue");
    } else if (c == "flush") {
        tasks_.spawn(ex_, ctl_flush(std::move(done)), "smx flush");
    } else if (c == "hold" || c == "release") {
        tasks_.spawn(ex_, ctl_hold(req.args[0], c == "hold", std::move(done)), "smx hold");
    } else if (c == "delete") {
        tasks_.spawn(ex_, ctl_delete(req.args[0], std::move(done)), "smx delete");
    } else {
        done({1, "unknown command \"" + c +
                     "\" (this queue manager knows: stats, queue, qshape, show, requeue, flush, hold, release, delete)"});
    }
}

asio::awaitable<void> Qmgr::ctl_flush(CtlDone done) {
    const auto n =
        co_await dbq_.run([now = clock_.now_us()](Defedb& db) { return db.flush_all(now); });
    if (!n) co_return done({1, "flush failed (see the log)"});
    spdlog::info("flush: {} deferred recipients due now", *n);
    deferred_.due_now();
    done({0, fmt::format("{} deferred recipients scheduled now\n", *n)});
}

// Held recipients live in DEFEDB, unindexed, so nothing schedules them.
// Those waiting in memory go there now; those in flight go there if their
// attempt fails for now.
asio::awaitable<void> Qmgr::ctl_hold(std::string id, bool hold, CtlDone done) {
    std::size_t here = 0;
    if (Ta* ta = queue_.find(id); ta && !ta->deleted()) {
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i) {
            const Rcpt& r = ta->rcpt(i);
            if (is_closed(r.state()) || r.state() == RcptState::bouncing) continue;
            queue_.set_hold(*ta, i, hold);
            ++here;
            if (hold && r.state() == RcptState::active) {
                const bool failed = r.last_reply() != sm::msg::Reply{};
                queue_.defer_begin(*ta, i, failed ? r.last_reply() : sm::msg::Reply{0, {}, "held by operator"},
                                   failed ? r.last_relay() : std::string());
                deferred_.park(*ta, i, clock_.now_us());
            }
        }
    }
    auto set_held = [id, hold](Defedb& db) { return db.set_held(id, hold); };
    const auto n = co_await dbq_.run(std::move(set_held));
    if (!n) co_return done({1, "defedb error (see the log)"});
    if (here + *n == 0) co_return done({1, "no such queue id"});
    spdlog::info("{}: {} by operator", id, hold ? "held" : "released");
    if (!hold) deferred_.refresh();
    done({0, fmt::format("{}: {} recipients {}\n", id, here + *n, hold ? "held" : "released")});
}

// Memory's part of removing a transaction (`smx delete`, a quarantine): it
// is marked deleted, its deferrals not yet handed to DEFEDB are not written,
// its recipients waiting here are dropped (one in flight has its result
// dropped). Returns how many open recipients memory held that DEFEDB does
// not count; cdb: its content file, if any.
std::size_t Qmgr::forget(Ta& ta, std::string& cdb) {
    std::size_t here = 0;
    queue_.mark_deleted(ta);
    cdb = Reaper::file_of(ta, true);
    std::vector<bool> unparked(ta.rcpts().size());
    for (auto i : deferred_.cancel_parks(ta.id)) unparked[i] = true;
    for (std::uint32_t i = 0; i < ta.rcpts().size(); ++i) {
        const Rcpt& r = ta.rcpt(i);
        if (is_closed(r.state())) continue;
        here += !r.from_defedb();  // the others are counted by DEFEDB
        if (r.state() == RcptState::active || unparked[i]) queue_.drop(ta, i);
    }
    check_ta(ta);
    return here;
}

// Gone everywhere, no DSN: memory, DEFEDB, IBDB and the content file.
asio::awaitable<void> Qmgr::ctl_delete(std::string id, CtlDone done) {
    std::size_t here = 0;
    std::string cdb = id;
    if (Ta* ta = queue_.find(id); ta && !ta->deleted()) here = forget(*ta, cdb);
    const auto n = co_await deferred_.remove_ta(id);
    if (!n) co_return done({1, "defedb error (see the log)"});
    if (here + *n == 0) co_return done({1, "no such queue id"});
    reaper_.drop(id, cdb);
    spdlog::info("{}: removed (deleted by operator, {} recipients)", id, here + *n);
    done({0, fmt::format("{}: deleted ({} recipients)\n", id, here + *n)});
}

} // namespace smx::qmgr
