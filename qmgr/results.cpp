// RESULT handling and the in-memory retry of deferred recipients.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace smx::qmgr {

namespace {

void log_rcpt(const Ta& ta, std::uint32_t idx, const std::string& relay, const char* status,
              const std::string& text) {
    if (relay.empty()) {
        spdlog::info("{}: to=<{}>, status={} ({})", ta.id, ta.rcpts[idx].addr, status, text);
        return;
    }
    const double delay = static_cast<double>(sm::now_us() - ta.arrival_us) / 1e6;
    spdlog::info("{}: to=<{}>, relay={}, delay={:.2f}, status={} ({})", ta.id,
                 ta.rcpts[idx].addr, relay, delay, status, text);
}

} // namespace

std::string reply_text(const sm::msg::RcptResult& r) {
    std::string s = std::to_string(r.code);
    if (!r.enhanced.empty()) s += ' ' + r.enhanced;
    if (!r.text.empty()) s += ' ' + r.text;
    return s;
}

bool connection_failed(const sm::msg::Result& r) {
    if (r.relay.empty()) return true;
    return !r.rcpts.empty() &&
           std::all_of(r.rcpts.begin(), r.rcpts.end(), [](const auto& x) { return x.code == 421; });
}

std::chrono::microseconds backoff(const sm::QueueConfig& q, std::uint32_t attempts) {
    using us = std::chrono::microseconds;
    us d = std::chrono::duration_cast<us>(q.retry_min);
    const us max = std::chrono::duration_cast<us>(q.retry_max);
    for (std::uint32_t i = 1; i < attempts && d < max; ++i) d *= 2;
    return std::min(d, max);
}

void Qmgr::on_result(std::uint64_t link, const sm::msg::Result& r) {
    std::string first_error;
    for (const auto& x : r.rcpts)
        if (x.code < 200 || x.code >= 300) {
            first_error = reply_text(x);
            break;
        }
    const bool failed = connection_failed(r);
    auto job = sched_.complete(link, r.da_id, failed, first_error);
    if (!job) {
        spdlog::warn("smtpc: RESULT for unknown delivery {} ignored", r.da_id);
        return;
    }
    Ta& ta = *job->ta;
    // Recipients are few per delivery; a missing answer is a temporary error.
    for (auto idx : job->idx) {
        auto it = std::find_if(r.rcpts.begin(), r.rcpts.end(),
                               [&](const auto& x) { return x.idx == idx; });
        if (it == r.rcpts.end()) {
            retry_later(ta, idx, r.relay, "4.4.0 smtpc returned no result for this recipient");
        } else if (it->code >= 200 && it->code < 300) {
            final(ta, idx, RcptState::done, r.relay, reply_text(*it));
        } else if (it->code >= 500 && it->code < 600) {
            final(ta, idx, RcptState::bounced, r.relay, reply_text(*it));
        } else {
            retry_later(ta, idx, r.relay, reply_text(*it));
        }
        // ta may be gone now, but only after its last open recipient, which
        // is then the last of this job: the others are still in flight.
    }
}

// A recipient reached done or bounced. The bounce message itself (RFC 3464
// DSN to the sender) comes with the deferred queue; for now it is logged.
void Qmgr::final(Ta& ta, std::uint32_t idx, RcptState state, const std::string& relay,
                 const std::string& status) {
    const bool sent = state == RcptState::done;
    log_rcpt(ta, idx, relay, sent ? "sent" : "bounced", status);
    ++(sent ? counters_.delivered : counters_.bounced);
    ibdb_.rcpt_done(ta.id, idx);
    if (queue_.finish(ta, idx, state)) finish_ta(ta);
}

void Qmgr::retry_later(Ta& ta, std::uint32_t idx, const std::string& relay,
                       const std::string& why) {
    Rcpt& r = ta.rcpts[idx];
    ++r.attempts;
    const auto delay = backoff(cfg_.queue, r.attempts);
    defer(ta, idx, relay, why, sm::now_us() + static_cast<std::uint64_t>(delay.count()));
}

void Qmgr::defer(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& why,
                 std::uint64_t until_us) {
    const auto lifetime = std::chrono::duration_cast<std::chrono::microseconds>(
        cfg_.queue.max_queue_lifetime);
    if (sm::now_us() - ta.arrival_us >= static_cast<std::uint64_t>(lifetime.count())) {
        final(ta, idx, RcptState::bounced, relay, "message expired in queue: " + why);
        return;
    }
    ta.rcpts[idx].last_error = why;
    queue_.defer(ta, idx, until_us);
    ++counters_.deferred;
    log_rcpt(ta, idx, relay, "deferred", why);
    arm_retry();
}

// Every recipient is final: the envelope is done and the content can go.
void Qmgr::finish_ta(Ta& ta) {
    ibdb_.ta_done(ta.id);
    unlink_later(ta.cdb_id);
    spdlog::info("{}: removed", ta.id);
    queue_.erase(ta.id);
}

// Unlinks run on the worker pool: removing the files cost as much as the
// whole run in the sendmail X measurements.
void Qmgr::unlink_later(const std::string& cdb_id) {
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

void Qmgr::arm_retry() {
    auto next = queue_.next_due();
    if (!next || (retry_armed_us_ && retry_armed_us_ <= *next)) return;
    retry_armed_us_ = *next;
    // Re-arming cancels the later wait; its handler sees operation_aborted.
    retry_timer_.expires_at(asio::system_timer::time_point(std::chrono::microseconds(*next)));
    retry_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        retry_armed_us_ = 0;
        retry_due();
    });
}

void Qmgr::retry_due() {
    // Group by transaction so recipients due together travel together.
    std::unordered_map<Ta*, std::vector<std::uint32_t>> by_ta;
    for (auto [ta, idx] : queue_.take_due(sm::now_us())) by_ta[ta].push_back(idx);
    for (auto& [ta, idx] : by_ta) schedule(*ta, idx);
    arm_retry();
}

} // namespace smx::qmgr
