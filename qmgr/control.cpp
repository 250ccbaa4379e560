// Control requests from the `smx` CLI (stats, flush, hold, release, delete;
// queue, qshape, show, requeue and what ALL names are in queue_report.cpp),
// and the counters behind `smx stats` and the Prometheus endpoint. Requests are taken on the
// event loop; each that needs DEFEDB is a coroutine that awaits its work on
// the DEFEDB strand, then replies.
#include "qmgr/qmgr.hpp"

#include "libsm/ids.hpp"
#include "qmgr/quarantine.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <memory>

namespace smx::qmgr {

std::vector<Metric> Qmgr::metrics() const {
    const IbdbStats& s = ibdb_.stats();
    const smx::msg::SmtpsLoad smtps = smtps_loads_.total();
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
        {"anvil_clients", anvil_.clients(), false,
         "Clients the per-client limits track (anvil.max_clients, plus those connected)"},
        {"anvil_evicted", anvil_.evicted(), true,
         "Clients forgotten before their rate window ended, for anvil.max_clients"},
    };
}

void Qmgr::control(const smx::msg::CtlRequest& req, CtlDone done) {
    const auto& c = req.command;
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
                                smx::rejection_name(e.reason), e.n);
        for (const auto& [loop, n] : smtps_sessions_by_loop())
            text += fmt::format("smtps_loop_{}_sessions {}\n", loop, n);
        done({0, std::move(text)});
    } else if (c == "queue" || c == "qshape" || c == "show") {
        tasks_.spawn(ex_, ctl_report(req, std::move(done)), "smx queue");
    } else if (c == "requeue") {
        tasks_.spawn(ex_, ctl_requeue(req, std::move(done)), "smx requeue");
    } else if (c == "flush") {
        tasks_.spawn(ex_, ctl_flush(std::move(done)), "smx flush");
    } else if (c == "hold" || c == "release" || c == "delete") {
        tasks_.spawn(ex_, ctl_ids(req, std::move(done)), "smx hold, release, delete");
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

namespace {

// postfix's queue names, for ALL QUEUE.
bool queue_name(const std::string& s) { return s == "active" || s == "deferred" || s == "hold"; }

// What ALL means without a queue name: whatever hold, release or delete
// can act on.
std::vector<std::string> all_queues(const std::string& command) {
    if (command == "hold") return {"active", "deferred"};
    if (command == "release") return {"hold"};
    return {"active", "deferred", "hold"};
}

} // namespace

// hold, release, delete: each queue id of the request, or ALL [QUEUE]:
// every message with a recipient in that queue. A line per id (an unknown
// one makes the status 1, the others are still done), or for ALL one line
// of totals, as postsuper prints; one message at a time, each its own
// DEFEDB transaction.
asio::awaitable<void> Qmgr::ctl_ids(smx::msg::CtlRequest req, CtlDone done) {
    const std::string& c = req.command;
    const auto& args = req.args;
    const bool all = !args.empty() && args[0] == "ALL";
    const bool ok = all ? args.size() == 1 || (args.size() == 2 && queue_name(args[1]))
                        : !args.empty() && args.size() <= smx::msg::max_ctl_ids &&
                              std::all_of(args.begin(), args.end(), smx::valid_ta_id);
    if (!ok)
        co_return done({1, fmt::format("usage: {} QUEUE-ID... (at most {}) | {} ALL "
                                       "[active|deferred|hold]",
                                       c, smx::msg::max_ctl_ids, c)});
    std::vector<std::string> ids = args;
    if (all) {
        std::vector<std::string> queues = all_queues(c);
        if (args.size() == 2) queues = {args[1]};
        auto picked = co_await queue_ids(std::move(queues));
        if (!picked) co_return done({1, "deferred queue unreadable (see the log)"});
        ids = std::move(*picked);
    }
    const std::string done_word = c == "hold" ? "held" : c == "release" ? "released" : "deleted";
    std::string text;
    std::size_t messages = 0, rcpts = 0;
    std::uint32_t status = 0;
    for (const auto& id : ids) {
        std::optional<std::size_t> n;
        if (c == "delete") n = co_await delete_ta(id);
        else n = co_await hold_ta(id, c == "hold");
        if (!n) co_return done({1, text + "defedb error (see the log)"});
        if (*n == 0 && !all) {  // one ALL picked may be gone since: not an error
            text += id + ": no such queue id\n";
            status = 1;
        } else if (*n > 0) {
            ++messages;
            rcpts += *n;
            if (!all) text += fmt::format("{}: {} ({} recipients)\n", id, done_word, *n);
        }
    }
    if (c == "release") deferred_.refresh();
    if (all) text = fmt::format("{} messages {} ({} recipients)\n", messages, done_word, rcpts);
    done({status, std::move(text)});
}

// Held recipients live in DEFEDB, unindexed, so nothing schedules them.
// Those waiting in memory go there now; those in flight go there if their
// attempt fails for now. Returns the recipients held or released (0: no
// such message), nullopt on a DEFEDB error.
asio::awaitable<std::optional<std::size_t>> Qmgr::hold_ta(std::string id, bool hold) {
    std::size_t here = 0;
    if (Ta* ta = queue_.find(id); ta && !ta->deleted()) {
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i) {
            const Rcpt& r = ta->rcpt(i);
            if (is_closed(r.state()) || r.state() == RcptState::bouncing) continue;
            queue_.set_hold(*ta, i, hold);
            ++here;
            if (hold && r.state() == RcptState::active) {
                const bool failed = r.last_reply() != smx::msg::Reply{};
                park_held(*ta, i, failed ? r.last_reply() : smx::msg::Reply{0, {}, "held by operator"},
                          failed ? r.last_relay() : std::string());
            }
        }
    }
    auto set_held = [id, hold](Defedb& db) { return db.set_held(id, hold); };
    const auto n = co_await dbq_.run(std::move(set_held));
    if (!n) co_return std::nullopt;
    if (here + *n > 0) spdlog::info("{}: {} by operator", id, hold ? "held" : "released");
    co_return here + *n;
}

void Qmgr::park_held(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay) {
    queue_.set_hold(ta, idx, true);
    queue_.defer_begin(ta, idx, std::move(why), std::move(relay));
    deferred_.park(ta, idx, clock_.now_us());
}

// Memory's part of removing a transaction (`smx delete`, a quarantine): it
// is marked deleted, its deferrals not yet handed to DEFEDB are not written,
// its recipients waiting here are dropped (one in flight has its result
// dropped). Returns how many open recipients memory held that DEFEDB does
// not count; content: its content file, if any.
std::size_t Qmgr::forget(Ta& ta, std::string& content) {
    std::size_t here = 0;
    queue_.mark_deleted(ta);
    content = Reaper::file_of(ta, true);
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
// Returns the recipients removed (0: no such message), nullopt on a DEFEDB
// error.
asio::awaitable<std::optional<std::size_t>> Qmgr::delete_ta(std::string id) {
    std::size_t here = 0;
    std::string content = id;
    if (Ta* ta = queue_.find(id); ta && !ta->deleted()) here = forget(*ta, content);
    const auto n = co_await deferred_.remove_ta(id);
    if (!n) co_return std::nullopt;
    if (here + *n == 0) co_return 0;
    reaper_.drop(id, content);
    spdlog::info("{}: removed (deleted by operator, {} recipients)", id, here + *n);
    co_return here + *n;
}

} // namespace smx::qmgr
