// Control requests from the `smx` CLI (stats, queue, flush, hold, release,
// delete), and the counters behind `smx stats` and the Prometheus endpoint.
// Requests are taken on the event loop; each that needs DEFEDB is a
// coroutine that awaits its work on the DEFEDB strand, then replies.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>

#include <ctime>
#include <map>
#include <memory>

namespace smx::qmgr {

namespace {

std::string fmt_time(std::uint64_t unix_us) {
    const std::time_t t = static_cast<std::time_t>(unix_us / 1'000'000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%a %b %d %H:%M:%S", &tm);
    return buf;
}

// One line per recipient of the listing.
struct Line {
    std::string addr, state, last_error;
    std::uint32_t attempts = 0;
    std::uint64_t next_try_us = 0;
};
struct Entry {
    std::uint64_t size = 0, arrival_us = 0;
    std::string sender;
    std::map<std::uint32_t, Line> rcpts;
};

// A CTL reply is one record (at most sm::rec::max_body): a huge queue is
// listed up to this size, and the summary line still counts everything.
constexpr std::size_t max_listing = 3u << 20;

std::string render(const std::map<std::string, Entry>& all) {
    std::string out = "-Queue ID-        --Size-- ----Arrival Time---- -Sender/Recipient-------\n";
    std::uint64_t bytes = 0, left_out = 0;
    for (const auto& [id, e] : all) {
        bytes += e.size;
        if (out.size() > max_listing) {
            ++left_out;
            continue;
        }
        out += fmt::format("{:<17} {:>8} {:<20} {}\n", id, e.size, fmt_time(e.arrival_us),
                           e.sender.empty() ? "MAILER-DAEMON" : e.sender);
        for (const auto& [idx, l] : e.rcpts) {
            out += fmt::format("    {} ({}, attempts={}", l.addr, l.state, l.attempts);
            if (l.next_try_us) out += ", next try " + fmt_time(l.next_try_us) + " UTC";
            out += ")\n";
            if (!l.last_error.empty()) out += "        (" + l.last_error + ")\n";
        }
        out += '\n';
    }
    if (left_out) out += fmt::format("... {} more requests not listed\n", left_out);
    out += fmt::format("-- {} Kbytes in {} requests.\n", (bytes + 1023) / 1024, all.size());
    return out;
}

} // namespace

std::vector<std::pair<const char*, std::uint64_t>> Qmgr::metrics() const {
    const IbdbStats& s = ibdb_.stats();
    return {
        {"received", counters_.received},
        {"rejected", counters_.rejected},
        {"tempfailed", counters_.tempfailed},
        {"delivered", counters_.delivered},
        {"deferred", counters_.deferred},
        {"bounced", bouncer_.bounced()},
        {"dsn_sent", bouncer_.dsn_sent()},
        {"quarantined", counters_.quarantined + sweeper_.quarantined() + deferred_.quarantined()},
        {"ibdb_commits", s.commits},
        {"ibdb_transactions", s.transactions},
        {"ibdb_records", s.records},
        {"ibdb_pending", ibdb_.pending()},
        {"ibdb_files_deleted", s.files_deleted},
        {"ibdb_corrupt_records", s.corrupt_records},
        {"ibdb_write_failures", s.write_failures},
        {"fsync_us_total", s.fsync_us_total},
        {"fsync_us_max", s.fsync_us_max},
        {"queue_size", queue_.rcpts()},
        {"queue_transactions", queue_.transactions()},
        {"queue_deferred", deferred_.count()},
        {"active_deliveries", sched_.active_deliveries()},
        {"destinations", sched_.destinations()},
        {"smtpc_connections", sched_.links()},
        {"smtps_connections", counters_.smtps_connections},
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
        for (const auto& [name, value] : metrics()) text += fmt::format("{} {}\n", name, value);
        done({0, std::move(text)});
    } else if (c == "queue") {
        tasks_.spawn(ex_, ctl_queue(std::move(done)), "smx queue");
    } else if (c == "flush") {
        tasks_.spawn(ex_, ctl_flush(std::move(done)), "smx flush");
    } else if (c == "hold" || c == "release") {
        tasks_.spawn(ex_, ctl_hold(req.args[0], c == "hold", std::move(done)), "smx hold");
    } else if (c == "delete") {
        tasks_.spawn(ex_, ctl_delete(req.args[0], std::move(done)), "smx delete");
    } else {
        done({1, "unknown command \"" + c +
                     "\" (this queue manager knows: stats, queue, flush, hold, release, delete)"});
    }
}

// The active queue is copied here; DEFEDB is read (in chunks) on its strand
// and merged in: a recipient memory is working on shows memory's state.
asio::awaitable<void> Qmgr::ctl_queue(CtlDone done) {
    auto all = std::make_shared<std::map<std::string, Entry>>();
    queue_.for_each([&](const Ta& ta) {
        Entry& e = (*all)[ta.id];
        e.size = ta.size();
        e.arrival_us = ta.arrival_us();
        e.sender = ta.sender();
        for (std::uint32_t i = 0; i < ta.rcpts().size(); ++i) {
            const Rcpt& r = ta.rcpt(i);
            if (is_closed(r.state())) continue;
            e.rcpts[i] = Line{r.addr(), to_string(r.state()), r.last_error(), r.attempts(), 0};
        }
    });
    auto merge = [all](Defedb& db) {
        db.for_each([&](const DeferredTa& t) {
            Entry& e = (*all)[t.envelope.ta_id];
            e.size = t.envelope.size;
            e.arrival_us = t.envelope.arrival_us;
            e.sender = t.envelope.sender;
            for (const auto& r : t.rcpts)
                e.rcpts.try_emplace(r.idx, Line{r.addr, r.held ? "held" : "deferred",
                                                r.last_error, r.attempts,
                                                r.held ? 0 : r.next_try_us});
        });
        std::erase_if(*all, [](const auto& kv) { return kv.second.rcpts.empty(); });
        return render(*all);
    };
    auto text = co_await dbq_.run(std::move(merge));
    if (text) done({0, std::move(*text)});
    else done({1, "deferred queue unreadable (see the log)"});
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
                queue_.defer_begin(*ta, i,
                                   r.last_error().empty() ? "held by operator" : r.last_error());
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

// Gone everywhere, no DSN: memory (a recipient in flight has its result
// dropped), DEFEDB, IBDB and the content file.
asio::awaitable<void> Qmgr::ctl_delete(std::string id, CtlDone done) {
    std::size_t here = 0;
    std::string cdb = id;
    if (Ta* ta = queue_.find(id); ta && !ta->deleted()) {
        queue_.mark_deleted(*ta);
        cdb = ta->cdb_id();
        // Deferrals not yet handed to DEFEDB are simply not written.
        std::vector<bool> unparked(ta->rcpts().size());
        for (auto i : deferred_.cancel_parks(id)) unparked[i] = true;
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i) {
            const Rcpt& r = ta->rcpt(i);
            if (is_closed(r.state())) continue;
            here += !r.from_defedb();  // the others are counted by DEFEDB
            if (r.state() == RcptState::active || unparked[i]) queue_.drop(*ta, i);
        }
        check_ta(*ta);
    }
    const auto n = co_await deferred_.remove_ta(id);
    if (!n) co_return done({1, "defedb error (see the log)"});
    if (here + *n == 0) co_return done({1, "no such queue id"});
    reaper_.drop(id, cdb);
    spdlog::info("{}: removed (deleted by operator, {} recipients)", id, here + *n);
    done({0, fmt::format("{}: deleted ({} recipients)\n", id, here + *n)});
}

} // namespace smx::qmgr
