// The deferred queue: recipients that failed for now move to DEFEDB and leave
// memory; a timer on DEFEDB's next-try index feeds them back when due.
// Every DEFEDB call runs on the DEFEDB strand of the worker pool.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <fstream>
#include <unordered_map>
#include <unordered_set>

namespace smx::qmgr {

namespace {

constexpr std::size_t due_batch = 1000;  // recipients per due() call
constexpr auto maintenance_every = std::chrono::seconds(60);
constexpr auto db_retry_after = std::chrono::seconds(5);

} // namespace

// A recipient failed for now (state moving): write it to DEFEDB (with the
// next batch).
void Qmgr::park(const Ta& ta, std::uint32_t idx, std::uint64_t until_us) {
    const Rcpt& r = ta.rcpt(idx);
    DeferredRcpt d;
    d.ta_id = ta.id;
    d.idx = idx;
    d.addr = r.addr();
    d.attempts = r.attempts();
    d.first_arrival_us = ta.arrival_us();
    d.last_attempt_us = sm::now_us();
    d.next_try_us = until_us;
    d.last_error = r.last_error();
    d.held = r.hold();
    d.warned = r.warned();
    parks_.push_back(Park{ta.env, std::move(d), !r.from_defedb()});
    kick_db();
}

void Qmgr::drop_from_defedb(const Ta& ta, std::uint32_t idx) {
    removes_.emplace_back(ta.id, idx);
    kick_db();
}

// One DEFEDB batch per event-loop turn, and only one out at a time: what
// arrives meanwhile goes into the next one (one fsync for many deferrals).
void Qmgr::kick_db() {
    if (db_posted_ || db_busy_) return;
    db_posted_ = true;
    asio::post(ex_, [this] {
        db_posted_ = false;
        write_db();
    });
}

void Qmgr::write_db() {
    if (db_busy_ || (parks_.empty() && removes_.empty() && checks_.empty())) return;
    db_busy_ = true;
    auto parks = std::make_shared<std::vector<Park>>(std::exchange(parks_, {}));
    auto removes = std::make_shared<std::vector<std::pair<std::string, std::uint32_t>>>(
        std::exchange(removes_, {}));
    auto checks = std::make_shared<std::vector<Check>>(std::exchange(checks_, {}));
    struct Gone {
        std::vector<Check> checks;  // transactions DEFEDB no longer holds
        std::uint64_t count = 0;
    };
    db<Gone>(
        [parks, removes, checks](Defedb& db) {
            std::vector<DeferredTa> fresh;
            std::unordered_map<std::string, std::size_t> at;
            std::unordered_set<std::string> held;
            for (const auto& p : *parks) {
                if (p.rec.held) held.insert(p.rec.ta_id);
                if (!p.fresh) {
                    db.update(p.rec);
                    continue;
                }
                auto [it, added] = at.try_emplace(p.rec.ta_id, fresh.size());
                if (added) fresh.push_back(DeferredTa{*p.env, {}});
                fresh[it->second].rcpts.push_back(p.rec);
            }
            // One durable commit; IBDB records the moves only after it.
            if (!fresh.empty()) db.put_many(fresh);
            for (const auto& id : held) db.set_held(id, true);
            for (const auto& [id, idx] : *removes) db.remove(id, idx);
            Gone gone;
            for (const auto& c : *checks)
                if (!db.has_ta(c.ta_id)) gone.checks.push_back(c);
            gone.count = db.count();
            return gone;
        },
        [this, parks, removes, checks](std::optional<Gone> gone) {
            db_busy_ = false;
            if (!gone) {
                // Not written (e.g. ENOSPC): everything waits for the next try.
                parks_.insert(parks_.end(), parks->begin(), parks->end());
                removes_.insert(removes_.end(), removes->begin(), removes->end());
                checks_.insert(checks_.end(), checks->begin(), checks->end());
                db_retry_.expires_after(db_retry_after);
                db_retry_.async_wait([this](boost::system::error_code ec) {
                    if (!ec) write_db();
                });
                return;
            }
            defedb_count_ = gone->count;
            written(std::move(*parks), std::move(gone->checks));
            write_db();
        });
}

void Qmgr::written(std::vector<Park> parks, std::vector<Check> gone) {
    std::unordered_set<std::string> touched;
    for (const auto& p : parks) {
        if (p.fresh) ibdb_.rcpt_deferred(p.rec.ta_id, p.rec.idx);
        Ta* ta = queue_.find(p.rec.ta_id);
        if (!ta) continue;
        if (ta->deleted()) removes_.emplace_back(ta->id, p.rec.idx);
        queue_.deferred(*ta, p.rec.idx);
        touched.insert(ta->id);
    }
    for (const auto& id : touched)
        if (Ta* ta = queue_.find(id)) check_ta(*ta);
    // A transaction DEFEDB no longer holds and memory does not either: done.
    for (const auto& c : gone)
        if (!queue_.find(c.ta_id)) reaper_.finish(c.ta_id, c.cdb_id);
    if (!removes_.empty()) kick_db();
    if (!parks.empty()) refresh_due();
}

// Asks DEFEDB for its earliest next try and arms the timer for it.
void Qmgr::refresh_due() {
    if (refresh_busy_ || !accepting_) return;
    refresh_busy_ = true;
    db<std::optional<std::uint64_t>>([](Defedb& db) { return db.next_due_time(); },
                                     [this](std::optional<std::optional<std::uint64_t>> t) {
                                         refresh_busy_ = false;
                                         if (t && *t) arm_due(**t);
                                     });
}

void Qmgr::arm_due(std::uint64_t at_us) {
    if (!accepting_ || (due_at_ && due_at_ <= at_us)) return;
    due_at_ = at_us;
    // Re-arming cancels the later wait; its handler sees operation_aborted.
    due_timer_.expires_at(asio::system_timer::time_point(std::chrono::microseconds(at_us)));
    due_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        due_at_ = 0;
        fetch_due();
    });
}

// Takes due recipients into the active queue, as many as it has room for.
// They are leased in DEFEDB: after a crash they come back when the lease
// ends; while we hold them a later due() skips them.
void Qmgr::fetch_due() {
    if (due_busy_ || !accepting_) return;
    const std::size_t max = cfg_.queue.aq_max_entries;
    const std::size_t room = queue_.rcpts() < max ? max - queue_.rcpts() : 0;
    if (room == 0) {
        arm_due(sm::now_us() + 1'000'000);
        return;
    }
    due_busy_ = true;
    const std::size_t limit = std::min(room, due_batch);
    const auto lease = std::clamp<std::chrono::seconds>(cfg_.queue.retry_min, std::chrono::seconds(5),
                                                        std::chrono::seconds(300));
    const std::string spool = spool_, qdir = spool_ + "/quarantine";
    const bool hashed = cfg_.queue.cdb_hashed;
    struct Due {
        std::vector<DeferredTa> tas;
        std::uint64_t quarantined = 0;
    };
    db<Due>(
        [=](Defedb& db) {
            const auto now = sm::now_us();
            Due out;
            out.tas = db.due(now, limit,
                             now + static_cast<std::uint64_t>(
                                       std::chrono::microseconds(lease).count()));
            // Envelopes whose content is gone cannot be delivered: quarantine.
            std::erase_if(out.tas, [&](const DeferredTa& t) {
                struct stat st;
                const auto path = sm::cdb_path(spool, t.envelope.cdb_id, hashed);
                if (::stat(path.c_str(), &st) == 0) return false;
                const std::string note = qdir + "/" + t.envelope.ta_id + ".envelope";
                std::ofstream(note, std::ios::binary) << sm::msg::envelope_bytes(t.envelope);
                db.remove_ta(t.envelope.ta_id);
                spdlog::error("{}: content file {} missing; deferred envelope saved as {}",
                              t.envelope.ta_id, path, note);
                ++out.quarantined;
                return true;
            });
            return out;
        },
        [this, limit](std::optional<Due> due) {
            due_busy_ = false;
            if (!due) {
                // The leases were not written (e.g. ENOSPC): the index still
                // says "due", so asking again now would spin. Try later.
                arm_due(sm::now_us() + static_cast<std::uint64_t>(
                                           std::chrono::microseconds(db_retry_after).count()));
                return;
            }
            counters_.quarantined += due->quarantined;
            std::size_t n = due->quarantined;
            for (const auto& t : due->tas) n += t.rcpts.size();
            got_due(std::move(due->tas));
            if (n >= limit) fetch_due();
            else refresh_due();
        });
}

void Qmgr::got_due(std::vector<DeferredTa> tas) {
    for (auto& t : tas) {
        if (deleting_.count(t.envelope.ta_id)) continue;
        Ta* ta = queue_.find(t.envelope.ta_id);
        const bool created = !ta;
        if (!ta) {
            // Only the recipients DEFEDB gave us are ours; the others stay closed.
            ta = queue_.admit_untracked(t.envelope);
        }
        if (ta->deleted()) continue;
        std::vector<std::uint32_t> todo;
        for (const auto& d : t.rcpts) {
            if (d.idx >= ta->rcpts().size()) continue;
            // Still ours from an earlier lease (in flight, being written).
            if (!created && ta->rcpt(d.idx).state() != RcptState::deferred) continue;
            queue_.due(*ta, d.idx, d);
            if (expired(*ta)) {
                bounce(*ta, d.idx, {},
                       expired_rcpt(ta->rcpt(d.idx).addr(), d.last_error, {}, d.last_attempt_us));
                continue;
            }
            todo.push_back(d.idx);
        }
        if (!todo.empty()) schedule(*ta, todo);
        check_ta(*ta);
    }
}

// Once a minute: a DEFEDB checkpoint, the recipient count for the stats, and
// a fresh look at the index (e.g. after an operator release).
void Qmgr::maintain() {
    db<std::uint64_t>(
        [](Defedb& db) {
            db.checkpoint();
            return db.count();
        },
        [this](std::optional<std::uint64_t> n) {
            if (n) defedb_count_ = *n;
        });
    refresh_due();
    maint_timer_.expires_after(maintenance_every);
    maint_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) maintain();
    });
}

} // namespace smx::qmgr
