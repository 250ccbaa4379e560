// The deferred queue: recipients that failed for now move to DEFEDB and leave
// memory; a timer on DEFEDB's next-try index feeds them back when due.
// Every DEFEDB call runs on the DEFEDB strand of the worker pool.
#include "qmgr/deferred.hpp"

#include "libsm/await.hpp"
#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"
#include "qmgr/quarantine.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

namespace smx::qmgr {

namespace {

constexpr std::size_t due_batch = 1000;  // recipients per due() call
constexpr auto maintenance_every = std::chrono::seconds(60);

// The body's bytes to a new content file at path, a piece at a time, written
// and synced with its name (content_file's tmp and rename).
int write_copy(const smx::content::Body& body, const std::string& path) {
    static constexpr std::size_t piece = 64 * 1024;
    const std::string tmp = path + ".tmp";
    int fd = -1;
    int err = smx::content::open_tmp(tmp, fd);
    std::string buf;
    for (std::uint64_t off = 0; !err && off < body.size(); off += buf.size()) {
        if ((err = body.read_at(off, piece, buf))) break;
        if (buf.empty()) err = EIO;  // cut short since it was checked
        else err = smx::content::write_all(fd, buf);
    }
    return smx::content::finish_tmp(fd, err, tmp, path, true);
}

// DEFEDB never names a content segment (which goes once memory no longer
// names it): a message in one is copied to a content file of its own, named
// by its transaction id and durable (synced, its name too) before DEFEDB
// holds the envelope that names it. A copy that cannot be written fails
// the batch, which is tried again. A record that is not what the envelope
// says (smx::content::Body: its CRC checked too) is not copied: false, and
// the envelope names the missing copy, to be quarantined when due.
bool copy_out(const smx::content::Store& store, smx::msg::TaCommit& env) {
    if (has_defedb_copy(store, env)) {
        env.content_id = env.ta_id;  // copied for an earlier batch
        return true;
    }
    smx::content::Body body;
    const int err = body.open(store, env.content_id, env.ta_id, env.size, nullptr, true);
    const std::string from = std::exchange(env.content_id, env.ta_id);
    if (err) {
        spdlog::error("{}: content segment record {} unusable ({}): not copied for DEFEDB; "
                      "the transaction is quarantined",
                      env.ta_id, from, err == ENOENT ? "missing" : body.why());
        return false;
    }
    if (const int e = write_copy(body, smx::content::file_path(store.dir, env.ta_id, store.hashed)))
        throw DefedbError(env.ta_id + ": copy of its content for DEFEDB: " + std::strerror(e),
                          false);
    return true;
}

} // namespace

bool has_defedb_copy(const smx::content::Store& store, const smx::msg::TaCommit& env) {
    // Ours alone: SMTPS's account can put a file of its own under that name.
    const smx::content::Expect ours{store.writers.qmgr, store.writers.qmgr, env.size, true};
    std::string why;
    return smx::content::check_read(store.dir, env.ta_id, store.hashed, ours, why) == 0;
}

DeferredQueue::DeferredQueue(const smx::Config& cfg, asio::any_io_executor ex, DefedbStrand& db,
                             Hooks hooks, const smx::Clock& clock,
                             std::chrono::milliseconds retry_after)
    : cfg_(cfg), clock_(clock), retry_after_(retry_after), ex_(ex), db_(db),
      hooks_(std::move(hooks)), store_(smx::content::store_for(cfg)),
      quarantine_(cfg.quarantine_dir_abs()),
      retry_timer_(ex), due_timer_(ex), maint_timer_(ex) {}

void DeferredQueue::start() {
    refresh_ = true;
    tasks_.spawn(ex_, due_loop(), "defedb due loop");
    tasks_.spawn(ex_, maintenance(), "defedb maintenance");
    kick();
}

void DeferredQueue::stop() {
    running_ = false;
    due_timer_.cancel();
    maint_timer_.cancel();
    retry_timer_.cancel();
}

// A recipient failed for now (state moving): write it to DEFEDB (with the
// next batch).
void DeferredQueue::park(const Ta& ta, std::uint32_t idx, std::uint64_t until_us) {
    const Rcpt& r = ta.rcpt(idx);
    DeferredRcpt d;
    d.ta_id = ta.id;
    d.idx = idx;
    d.addr = r.addr();
    d.attempts = r.attempts();
    d.first_arrival_us = ta.arrival_us();
    d.last_attempt_us = clock_.now_us();
    d.next_try_us = until_us;
    d.last_reply = r.last_reply();
    d.last_relay = r.last_relay();
    d.held = r.hold();
    d.warned = r.warned();
    parks_.push_back(Park{ta.env, std::move(d), !r.from_defedb()});
    kick();
}

void DeferredQueue::remove(const std::string& ta_id, std::uint32_t idx) {
    removes_.emplace_back(ta_id, idx);
    kick();
}

void DeferredQueue::check(const std::string& ta_id, const std::string& content_id) {
    checks_.push_back(Check{ta_id, content_id});
    kick();
}

std::vector<std::uint32_t> DeferredQueue::cancel_parks(const std::string& ta_id) {
    std::vector<std::uint32_t> idx;
    std::erase_if(parks_, [&](const Park& p) {
        if (p.rec.ta_id != ta_id) return false;
        idx.push_back(p.rec.idx);
        return true;
    });
    return idx;
}

asio::awaitable<std::optional<std::size_t>> DeferredQueue::remove_ta(std::string ta_id) {
    deleting_.insert(ta_id);
    auto remove = [ta_id](Defedb& db) {
        const std::size_t n = db.remove_ta(ta_id);  // before count(): make_pair's order is unspecified
        return std::make_pair(n, db.count());
    };
    auto r = co_await db_.run(std::move(remove));
    deleting_.erase(ta_id);
    if (!r) co_return std::nullopt;
    count_ = r->second;
    co_return r->first;
}

// One DEFEDB batch at a time, and the writer starts in the next event-loop
// turn: what arrives meanwhile goes into the next batch (one fsync for many
// deferrals).
void DeferredQueue::kick() {
    if (writing_) return;
    writing_ = true;
    tasks_.spawn(ex_, writer(), "defedb writer");
}

asio::awaitable<void> DeferredQueue::writer() {
    struct Gone {
        std::vector<Check> checks;  // transactions DEFEDB no longer holds
        std::uint64_t count = 0;
    };
    while (!parks_.empty() || !removes_.empty() || !checks_.empty()) {
        auto parks = std::exchange(parks_, {});
        auto removes = std::exchange(removes_, {});
        auto checks = std::exchange(checks_, {});
        // The job reads this frame, which waits for it.
        auto batch = [&, store = store_, now = clock_.now_us()](Defedb& db) {
            std::vector<DeferredTa> fresh;
            std::unordered_map<std::string, std::size_t> at;
            std::unordered_set<std::string> held, unusable;
            for (const auto& p : parks) {
                if (p.rec.held) held.insert(p.rec.ta_id);
                if (!p.fresh) {
                    db.update(p.rec);
                    continue;
                }
                auto [it, added] = at.try_emplace(p.rec.ta_id, fresh.size());
                if (added) {
                    fresh.push_back(DeferredTa{*p.env, {}});
                    auto& env = fresh.back().envelope;
                    if (smx::content::parse_segment_ref(env.content_id) && !copy_out(store, env))
                        unusable.insert(env.ta_id);
                }
                fresh[it->second].rcpts.push_back(p.rec);
                // Due at once: the due loop quarantines what has no content.
                if (unusable.count(p.rec.ta_id)) fresh[it->second].rcpts.back().next_try_us = now;
            }
            // One durable commit; IBDB records the moves only after it.
            if (!fresh.empty()) db.put_many(fresh);
            for (const auto& id : held) db.set_held(id, true);
            for (const auto& [id, idx] : removes) db.remove(id, idx);
            Gone g;
            for (const auto& c : checks)
                if (!db.has_ta(c.ta_id)) g.checks.push_back(c);
            g.count = db.count();
            return g;
        };
        auto gone = co_await db_.run(std::move(batch));
        if (!gone) {
            // Not written (e.g. ENOSPC): everything waits for the next try.
            parks_.insert(parks_.end(), parks.begin(), parks.end());
            removes_.insert(removes_.end(), removes.begin(), removes.end());
            checks_.insert(checks_.end(), checks.begin(), checks.end());
            if (!running_) break;
            retry_timer_.expires_after(retry_after_);
            auto [ec] = co_await retry_timer_.async_wait(smx::await_tuple);
            if (ec) break;  // stop()
            continue;
        }
        count_ = gone->count;
        const bool parked = !parks.empty();
        hooks_.written(std::move(parks), std::move(gone->checks));
        if (parked) refresh();
    }
    writing_ = false;
}

// The due loop reads DEFEDB's earliest next try at a refresh() (a new park,
// a release, the maintenance), waits for it, and takes what is due.
void DeferredQueue::refresh() {
    if (!running_) return;
    refresh_ = true;
    due_timer_.cancel();
}

void DeferredQueue::due_now() { arm(clock_.now_us()); }

void DeferredQueue::arm(std::uint64_t at_us) {
    if (!running_ || (due_at_ && due_at_ <= at_us)) return;
    due_at_ = at_us;
    // Re-arming cancels the wait, and the loop waits again for the earlier
    // time. A wait measured on the clock, so a test clock that jumps ahead
    // is due at once.
    const std::uint64_t now = clock_.now_us();
    due_timer_.expires_after(std::chrono::microseconds(at_us > now ? at_us - now : 0));
}

asio::awaitable<void> DeferredQueue::due_loop() {
    while (running_) {
        if (refresh_) {
            refresh_ = false;
            auto t = co_await db_.run([](Defedb& db) { return db.next_due_time(); });
            if (t && *t) arm(**t);
            continue;
        }
        if (due_at_ == 0) due_timer_.expires_at(asio::system_timer::time_point::max());
        auto [ec] = co_await due_timer_.async_wait(smx::await_tuple);
        if (ec) continue;  // re-armed, refresh() or stop(): look again
        due_at_ = 0;
        co_await fetch();
    }
}

// Takes due recipients into the active queue, as many as it has room for.
// They are leased in DEFEDB: after a crash they come back when the lease
// ends; while we hold them a later due() skips them.
asio::awaitable<void> DeferredQueue::fetch() {
    const auto lease = std::clamp<std::chrono::seconds>(cfg_.queue.retry_min, std::chrono::seconds(5),
                                                        std::chrono::seconds(300));
    const smx::content::Store store = store_;
    const std::string qdir = quarantine_;
    struct Due {
        std::vector<DeferredTa> tas;
        std::uint64_t quarantined = 0;
    };
    while (running_) {
        const std::size_t room = hooks_.room();
        if (room == 0) {
            arm(clock_.now_us() + 1'000'000);
            co_return;
        }
        const std::size_t limit = std::min(room, due_batch);
        auto take = [=, &clock = clock_](Defedb& db) {
            const auto now = clock.now_us();
            Due out;
            out.tas = db.due(now, limit,
                             now + static_cast<std::uint64_t>(
                                       std::chrono::microseconds(lease).count()));
            // Envelopes without their content (gone, or not what they say)
            // cannot be delivered: quarantine.
            std::erase_if(out.tas, [&](const DeferredTa& t) {
                std::string why;
                // The content its due recipients need.
                if (smx::content::check_read(store.dir, t.envelope.content_id, store.hashed,
                                            smx::content::message_file(store.writers, t.envelope.size),
                                            why) == 0)
                    return false;
                const std::string name = t.envelope.ta_id + ".envelope";
                const std::string err =
                    quarantine_write(qdir, name, smx::msg::envelope_bytes(t.envelope));
                db.remove_ta(t.envelope.ta_id);
                if (err.empty())
                    spdlog::error("{}: content {} {}; deferred envelope saved as {}/{}",
                                  t.envelope.ta_id, t.envelope.content_id, why, qdir, name);
                else
                    spdlog::error("{}: content {} {}; deferred envelope not saved ({})",
                                  t.envelope.ta_id, t.envelope.content_id, why, err);
                ++out.quarantined;
                return true;
            });
            return out;
        };
        auto due = co_await db_.run(std::move(take));
        if (!due) {
            // The leases were not written (e.g. ENOSPC): the index still
            // says "due", so asking again now would spin. Try later.
            arm(clock_.now_us() +
                static_cast<std::uint64_t>(std::chrono::microseconds(retry_after_).count()));
            co_return;
        }
        quarantined_ += due->quarantined;
        std::size_t n = due->quarantined;
        for (const auto& t : due->tas) n += t.rcpts.size();
        std::erase_if(due->tas, [this](const DeferredTa& t) {
            return deleting_.count(t.envelope.ta_id) > 0;
        });
        hooks_.due(std::move(due->tas));
        if (n < limit) {
            refresh_ = true;
            co_return;
        }
    }
}

// Once a minute: a DEFEDB checkpoint, the recipient count for the stats, and
// a fresh look at the index (e.g. after an operator release).
asio::awaitable<void> DeferredQueue::maintenance() {
    while (running_) {
        auto n = co_await db_.run([](Defedb& db) {
            db.checkpoint();
            return db.count();
        });
        if (n) count_ = *n;
        if (!running_) break;
        refresh();
        maint_timer_.expires_after(maintenance_every);
        auto [ec] = co_await maint_timer_.async_wait(smx::await_tuple);
        if (ec) break;  // stop()
    }
}

} // namespace smx::qmgr
