#include "qmgr/queue.hpp"

#include "libsm/panic.hpp"

#include <string>

namespace smx::qmgr {

namespace {

using S = RcptState;
using E = RcptEvent;

struct Edge {
    S from;
    E ev;
    S to;
};

// The table of queue.hpp, row by row.
constexpr Edge edges[] = {
    {S::active, E::dispatch, S::inflight},      {S::active, E::defer_begin, S::moving},
    {S::active, E::bounce_begin, S::bouncing},  {S::active, E::drop, S::done},
    {S::inflight, E::requeue, S::active},       {S::inflight, E::sent, S::done},
    {S::inflight, E::defer_begin, S::moving},   {S::inflight, E::bounce_begin, S::bouncing},
    {S::inflight, E::drop, S::done},            {S::moving, E::deferred, S::deferred},
    {S::moving, E::drop, S::done},              {S::bouncing, E::bounce_failed, S::moving},
    {S::bouncing, E::bounced, S::bounced},      {S::deferred, E::due, S::active},
    {S::untracked, E::due, S::active},
};

// The states by their names in the table (to_string is the listing's word).
const char* state_name(RcptState s) {
    switch (s) {
    case S::active: return "active";
    case S::inflight: return "inflight";
    case S::moving: return "moving";
    case S::deferred: return "deferred";
    case S::bouncing: return "bouncing";
    case S::done: return "done";
    case S::bounced: return "bounced";
    case S::untracked: return "untracked";
    }
    return "?";
}

[[noreturn]] void impossible(const Ta& ta, std::uint32_t idx, const std::string& what) {
    smx::panic("qmgr: " + ta.id + " recipient " + std::to_string(idx) + ": " + what);
}

} // namespace

const char* to_string(RcptState s) {
    switch (s) {
    case RcptState::active: return "active";
    case RcptState::inflight: return "in-flight";
    case RcptState::moving: return "deferred";
    case RcptState::deferred: return "deferred";
    case RcptState::bouncing: return "bounced";
    case RcptState::done: return "done";
    case RcptState::bounced: return "bounced";
    case RcptState::untracked: return "untracked";
    }
    return "?";
}

const char* to_string(RcptEvent e) {
    switch (e) {
    case RcptEvent::dispatch: return "dispatch";
    case RcptEvent::requeue: return "requeue";
    case RcptEvent::sent: return "sent";
    case RcptEvent::defer_begin: return "defer_begin";
    case RcptEvent::deferred: return "deferred";
    case RcptEvent::bounce_begin: return "bounce_begin";
    case RcptEvent::bounce_failed: return "bounce_failed";
    case RcptEvent::bounced: return "bounced";
    case RcptEvent::due: return "due";
    case RcptEvent::drop: return "drop";
    }
    return "?";
}

std::optional<RcptState> next_state(RcptState from, RcptEvent ev) {
    for (const auto& e : edges)
        if (e.from == from && e.ev == ev) return e.to;
    return std::nullopt;
}

Ta* ActiveQueue::create(const smx::msg::TaCommit& env, RcptState initial) {
    auto [it, fresh] = tas_.try_emplace(env.ta_id);
    if (!fresh) return nullptr;
    auto ta = std::make_unique<Ta>(env.ta_id, std::make_shared<const smx::msg::TaCommit>(env));
    ta->active_us_ = clock_.now_us();
    ta->rcpts_.reserve(env.rcpts.size());
    for (const auto& r : env.rcpts) ta->rcpts_.emplace_back(r.addr, initial);
    if (!is_closed(initial)) {
        ta->open_ = static_cast<std::uint32_t>(ta->rcpts_.size());
        rcpts_ += ta->open_;
    }
    it->second = std::move(ta);
    return it->second.get();
}

Ta* ActiveQueue::admit(const smx::msg::TaCommit& env) { return create(env, RcptState::active); }

Ta* ActiveQueue::admit_recovered(const smx::msg::TaCommit& env, const std::vector<bool>& done,
                                 const std::vector<bool>& deferred) {
    Ta* ta = create(env, RcptState::active);
    if (!ta) return nullptr;
    // A crash between the DEFEDB write and IBDB's (unsynced) "deferred" record
    // can leave a recipient in both: DEFEDB may hold any of it.
    ta->touched_defedb_ = true;
    for (std::uint32_t i = 0; i < ta->rcpts_.size(); ++i) {
        Rcpt& r = ta->rcpts_[i];
        if (i < done.size() && done[i]) {
            r.state_ = RcptState::done;
        } else if (i < deferred.size() && deferred[i]) {
            r.state_ = RcptState::deferred;
            r.from_defedb_ = true;
        } else {
            continue;
        }
        --ta->open_;
        --rcpts_;
    }
    return ta;
}

Ta* ActiveQueue::admit_untracked(const smx::msg::TaCommit& env) {
    Ta* ta = create(env, RcptState::untracked);
    if (ta) ta->touched_defedb_ = true;
    return ta;
}

Ta* ActiveQueue::find(const std::string& id) {
    auto it = tas_.find(id);
    return it == tas_.end() ? nullptr : it->second.get();
}

void ActiveQueue::retire(Ta& ta) {
    if (ta.open_ != 0) smx::panic("qmgr: " + ta.id + " retired with open recipients");
    tas_.erase(ta.id);
}

void ActiveQueue::abandon(const std::string& id) {
    auto it = tas_.find(id);
    if (it == tas_.end()) return;
    const Ta& ta = *it->second;
    // Nothing is scheduled before the record is durable; an operator's hold
    // or delete may have touched it meanwhile.
    for (std::uint32_t i = 0; i < ta.rcpts_.size(); ++i)
        if (ta.rcpts_[i].state_ == RcptState::inflight || ta.rcpts_[i].state_ == RcptState::bouncing)
            impossible(ta, i, std::string("abandoned while ") + state_name(ta.rcpts_[i].state_));
    rcpts_ -= ta.open_;
    tas_.erase(it);
}

// The one place a recipient's state changes; the open counts follow it.
Rcpt& ActiveQueue::step(Ta& ta, std::uint32_t idx, RcptEvent ev) {
    if (idx >= ta.rcpts_.size()) impossible(ta, idx, "no such recipient");
    Rcpt& r = ta.rcpts_[idx];
    const auto to = next_state(r.state_, ev);
    if (!to)
        impossible(ta, idx, std::string(to_string(ev)) + " in state " + state_name(r.state_));
    const bool was_open = !is_closed(r.state_), now_open = !is_closed(*to);
    r.state_ = *to;
    if (was_open && !now_open) {
        --ta.open_;
        --rcpts_;
    } else if (!was_open && now_open) {
        ++ta.open_;
        ++rcpts_;
    }
    return r;
}

void ActiveQueue::dispatch(Ta& ta, std::uint32_t idx) { step(ta, idx, RcptEvent::dispatch); }

void ActiveQueue::requeue(Ta& ta, std::uint32_t idx) { step(ta, idx, RcptEvent::requeue); }

void ActiveQueue::sent(Ta& ta, std::uint32_t idx) { step(ta, idx, RcptEvent::sent); }

void ActiveQueue::defer_begin(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay) {
    Rcpt& r = step(ta, idx, RcptEvent::defer_begin);
    r.last_reply_ = std::move(why);
    r.last_relay_ = std::move(relay);
}

void ActiveQueue::deferred(Ta& ta, std::uint32_t idx) {
    Rcpt& r = step(ta, idx, RcptEvent::deferred);
    r.from_defedb_ = true;
    r.hold_ = false;
    ta.touched_defedb_ = true;
}

void ActiveQueue::bounce_begin(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay) {
    Rcpt& r = step(ta, idx, RcptEvent::bounce_begin);
    r.last_reply_ = std::move(why);
    r.last_relay_ = std::move(relay);
}

void ActiveQueue::bounce_failed(Ta& ta, std::uint32_t idx, smx::msg::Reply why) {
    Rcpt& r = step(ta, idx, RcptEvent::bounce_failed);
    r.last_reply_ = std::move(why);
    r.last_relay_.clear();
}

void ActiveQueue::bounced(Ta& ta, std::uint32_t idx) { step(ta, idx, RcptEvent::bounced); }

void ActiveQueue::due(Ta& ta, std::uint32_t idx, const DeferredRcpt& rec) {
    Rcpt& r = step(ta, idx, RcptEvent::due);
    r.from_defedb_ = true;
    r.attempts_ = rec.attempts;
    r.last_reply_ = rec.last_reply;
    r.last_relay_ = rec.last_relay;
    r.warned_ = rec.warned;
}

void ActiveQueue::drop(Ta& ta, std::uint32_t idx) {
    if (!ta.deleted_) impossible(ta, idx, "dropped but not deleted");
    step(ta, idx, RcptEvent::drop);
}

void ActiveQueue::count_attempt(Ta& ta, std::uint32_t idx) {
    Rcpt& r = ta.rcpts_.at(idx);
    if (r.state_ != RcptState::active && r.state_ != RcptState::inflight)
        impossible(ta, idx, std::string("attempt counted in state ") + state_name(r.state_));
    ++r.attempts_;
}

void ActiveQueue::set_hold(Ta& ta, std::uint32_t idx, bool hold) {
    Rcpt& r = ta.rcpts_.at(idx);
    if (r.state_ != RcptState::active && r.state_ != RcptState::inflight &&
        r.state_ != RcptState::moving)
        impossible(ta, idx, std::string("hold in state ") + state_name(r.state_));
    r.hold_ = hold;
}

void ActiveQueue::mark_warned(Ta& ta, std::uint32_t idx) {
    Rcpt& r = ta.rcpts_.at(idx);
    if (r.state_ != RcptState::moving || r.warned_)
        impossible(ta, idx, "delay warning not on a fresh deferral");
    r.warned_ = true;
}

void ActiveQueue::mark_deleted(Ta& ta) {
    if (ta.deleted_) smx::panic("qmgr: " + ta.id + " deleted twice");
    ta.deleted_ = true;
}

} // namespace smx::qmgr
