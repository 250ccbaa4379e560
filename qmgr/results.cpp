// RESULT handling: each recipient is sent, bounced (5xx, or too old), or
// deferred to DEFEDB (4xx, connection failure, no answer).
#include "qmgr/qmgr.hpp"

#include "libsm/ids.hpp"
#include "libsm/panic.hpp"
#include "qmgr/quarantine.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace smx::qmgr {

bool connection_failed(const smx::msg::Result& r) {
    if (r.relay.empty()) return true;
    return !r.rcpts.empty() &&
           std::all_of(r.rcpts.begin(), r.rcpts.end(), [](const auto& x) { return x.code == 421; });
}

std::chrono::microseconds backoff(const smx::QueueConfig& q, std::uint32_t attempts) {
    using us = std::chrono::microseconds;
    us d = std::chrono::duration_cast<us>(q.retry_min);
    const us max = std::chrono::duration_cast<us>(q.retry_max);
    for (std::uint32_t i = 1; i < attempts && d < max; ++i) d *= 2;
    return std::min(d, max);
}

void Qmgr::on_result(std::uint64_t link, const smx::msg::Result& r, const smx::msg::Reply& missing) {
    smx::test_panic_point("on_result");
    smx::msg::Reply first_error;
    for (const auto& x : r.rcpts)
        if (x.code < 200 || x.code >= 300) {
            first_error = x.reply();
            break;
        }
    const bool failed = connection_failed(r);
    // A reclaimed delivery (no answer from SMTPC at all) is deferred, never
    // put back for another try right away.
    auto job = sched_.complete(link, r.da_id, failed, first_error, !r.rcpts.empty());
    if (!job) {
        spdlog::warn("smtpc: RESULT for unknown delivery {} ignored", r.da_id);
        return;
    }
    const std::string id = job->ta->id;
    // Content that is not what the envelope says can never be delivered:
    // the transaction goes to quarantine, and these recipients with it
    // (deleted: dropped below).
    if (!r.content_error.empty() && !job->ta->deleted()) {
        quarantine(*job->ta, r.content_error);
        if (!queue_.find(id)) return;
    }
    Ta& ta = *job->ta;
    const Attempt at{r.relay, job->sent_us, r.setup_us};
    // Recipients are few per delivery; a missing answer is a temporary error.
    for (auto idx : job->idx) {
        const Rcpt& rc = ta.rcpt(idx);
        if (rc.state() != RcptState::inflight) continue;
        auto it = std::find_if(r.rcpts.begin(), r.rcpts.end(),
                               [&](const auto& x) { return x.idx == idx; });
        if (ta.deleted()) {
            // `smx delete` while it was out: whatever happened, drop it.
            queue_.drop(ta, idx);
        } else if (it == r.rcpts.end()) {
            retry_later(ta, idx, at, missing);
        } else if (it->code >= 200 && it->code < 300) {
            bouncer_.relayed(ta, idx, r.relay, it->reply(), r.peer_dsn);
            sent(ta, idx, at, it->reply());
        } else if (it->code >= 500 && it->code < 600 && !cfg_.queue.soft_bounce) {
            auto why = dsn::failed_rcpt(rc.addr(), it->reply(), r.relay);
            why.last_attempt_us = clock_.now_us();
            bouncer_.bounce(ta, idx, at, std::move(why));
        } else {
            retry_later(ta, idx, at, it->reply());
        }
    }
    // Closing the last recipient takes ta out of memory, so check once at
    // the end (bouncing recipients keep it open until their DSN is safe).
    if (Ta* t = queue_.find(id)) check_ta(*t);
}

void Qmgr::quarantine(Ta& ta, const std::string& why) {
    // forget() may take ta out of memory: what is needed of it is copied first.
    const std::string id = ta.id, qdir = cfg_.quarantine_dir_abs(), name = id + ".envelope";
    const std::string err = quarantine_write(qdir, name, smx::msg::envelope_bytes(*ta.env));
    std::string content = id;
    const std::size_t here = forget(ta, content);
    ++counters_.quarantined;
    if (err.empty())
        spdlog::error("{}: content unusable ({}): quarantined, envelope saved as {}/{}", id, why,
                      qdir, name);
    else
        spdlog::error("{}: content unusable ({}): quarantined, envelope not saved ({})", id, why,
                      err);
    tasks_.spawn(ex_, drop_deferred(id, content, here), "quarantine");
}

// DEFEDB's part and the content file: the rest of a quarantine.
asio::awaitable<void> Qmgr::drop_deferred(std::string id, std::string content, std::size_t here) {
    const auto n = co_await deferred_.remove_ta(id);
    if (!n) spdlog::error("{}: not removed from DEFEDB after its quarantine (see above)", id);
    reaper_.drop(id, content);
    spdlog::info("{}: removed (quarantined, {} recipients)", id, here + n.value_or(0));
}

void Qmgr::sent(Ta& ta, std::uint32_t idx, const Attempt& at, const smx::msg::Reply& reply) {
    const std::uint64_t now = clock_.now_us();
    log_status(ta, idx, at, "sent", reply, now);
    ++counters_.delivered;
    counters_.queue_age_seconds.observe(seconds_since(ta.arrival_us(), now));
    if (ta.rcpt(idx).from_defedb()) deferred_.remove(ta.id, idx);
    else ibdb_.rcpt_done(ta.id, idx);
    queue_.sent(ta, idx);
}

bool Qmgr::expired(const Ta& ta) const {
    const auto lifetime =
        std::chrono::duration_cast<std::chrono::microseconds>(cfg_.queue.max_queue_lifetime);
    return smx::elapsed_us(ta.arrival_us(), clock_.now_us()) >=
           static_cast<std::uint64_t>(lifetime.count());
}

void Qmgr::retry_later(Ta& ta, std::uint32_t idx, const Attempt& at, smx::msg::Reply why) {
    queue_.count_attempt(ta, idx);
    const auto delay = backoff(cfg_.queue, ta.rcpt(idx).attempts());
    defer(ta, idx, at, std::move(why), clock_.now_us() + static_cast<std::uint64_t>(delay.count()));
}

// A temporary failure: past the queue lifetime it bounces, else the
// recipient goes to DEFEDB until until_us.
void Qmgr::defer(Ta& ta, std::uint32_t idx, const Attempt& at, smx::msg::Reply why,
                 std::uint64_t until_us) {
    // A job that waited for a dead destination may name recipients that
    // left meanwhile (held, deleted, bounced): not ours to defer any more.
    const RcptState st = ta.rcpt(idx).state();
    if (st != RcptState::active && st != RcptState::inflight) return;
    if (expired(ta)) {
        bouncer_.bounce(ta, idx, at,
                        dsn::expired_rcpt(ta.rcpt(idx).addr(), why, at.relay, clock_.now_us()));
        return;
    }
    log_status(ta, idx, at, "deferred", why, clock_.now_us());
    queue_.defer_begin(ta, idx, std::move(why), at.relay);
    ++counters_.deferred;
    bouncer_.warn_if_late(ta, idx, at.relay);
    deferred_.park(ta, idx, until_us);
}

} // namespace smx::qmgr
