#include "queue.hpp"

namespace smx::qmgr {

const char* to_string(RcptState s) {
    switch (s) {
    case RcptState::active: return "active";
    case RcptState::inflight: return "in-flight";
    case RcptState::moving: return "deferred";
    case RcptState::deferred: return "deferred";
    case RcptState::bouncing: return "bounced";
    case RcptState::done: return "done";
    case RcptState::bounced: return "bounced";
    }
    return "?";
}

Ta* ActiveQueue::add(const sm::msg::TaCommit& env, RcptState initial) {
    auto [it, fresh] = tas_.try_emplace(env.ta_id);
    if (!fresh) return nullptr;
    auto ta = std::make_unique<Ta>();
    ta->id = env.ta_id;
    ta->env = std::make_shared<const sm::msg::TaCommit>(env);
    ta->rcpts.reserve(env.rcpts.size());
    for (const auto& r : env.rcpts) ta->rcpts.push_back(Rcpt{r.addr, initial, 0, {}, false, false});
    if (!is_closed(initial)) {
        ta->open = static_cast<std::uint32_t>(ta->rcpts.size());
        rcpts_ += ta->open;
    }
    it->second = std::move(ta);
    return it->second.get();
}

Ta* ActiveQueue::find(const std::string& id) {
    auto it = tas_.find(id);
    return it == tas_.end() ? nullptr : it->second.get();
}

void ActiveQueue::erase(const std::string& id) {
    auto it = tas_.find(id);
    if (it == tas_.end()) return;
    rcpts_ -= it->second->open;
    tas_.erase(it);
}

bool ActiveQueue::close(Ta& ta, std::uint32_t idx, RcptState closed_state) {
    Rcpt& r = ta.rcpts.at(idx);
    if (is_closed(r.state)) return false;
    r.state = closed_state;
    --rcpts_;
    return --ta.open == 0;
}

void ActiveQueue::reopen(Ta& ta, std::uint32_t idx) {
    Rcpt& r = ta.rcpts.at(idx);
    if (!is_closed(r.state)) return;
    r.state = RcptState::active;
    ++rcpts_;
    ++ta.open;
}

} // namespace smx::qmgr
