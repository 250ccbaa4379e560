#include "queue.hpp"

namespace smx::qmgr {

const char* to_string(RcptState s) {
    switch (s) {
    case RcptState::active: return "active";
    case RcptState::inflight: return "in-flight";
    case RcptState::deferred: return "deferred";
    case RcptState::done: return "done";
    case RcptState::bounced: return "bounced";
    case RcptState::held: return "held";
    }
    return "?";
}

Ta* ActiveQueue::add(const sm::msg::TaCommit& env) {
    auto [it, fresh] = tas_.try_emplace(env.ta_id);
    if (!fresh) return nullptr;
    auto ta = std::make_unique<Ta>();
    ta->id = env.ta_id;
    ta->sender = env.sender;
    ta->cdb_id = env.cdb_id;
    ta->size = env.size;
    ta->arrival_us = env.arrival_us;
    ta->rcpts.reserve(env.rcpts.size());
    for (const auto& r : env.rcpts) ta->rcpts.push_back(Rcpt{r.addr, RcptState::active, 0, {}, 0});
    ta->open = static_cast<std::uint32_t>(ta->rcpts.size());
    rcpts_ += ta->rcpts.size();
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
    rcpts_ -= it->second->rcpts.size();
    tas_.erase(it);
}

bool ActiveQueue::finish(Ta& ta, std::uint32_t idx, RcptState final_state) {
    Rcpt& r = ta.rcpts.at(idx);
    if (is_final(r.state)) return false;
    r.state = final_state;
    return --ta.open == 0;
}

void ActiveQueue::defer(Ta& ta, std::uint32_t idx, std::uint64_t next_try_us) {
    Rcpt& r = ta.rcpts.at(idx);
    r.state = RcptState::deferred;
    r.next_try_us = next_try_us;
    deferred_.emplace(next_try_us, RcptRef{ta.id, idx});
}

std::vector<std::pair<Ta*, std::uint32_t>> ActiveQueue::take_due(std::uint64_t now_us) {
    std::vector<std::pair<Ta*, std::uint32_t>> out;
    auto end = deferred_.upper_bound(now_us);
    for (auto it = deferred_.begin(); it != end; ++it) {
        Ta* ta = find(it->second.ta_id);
        if (!ta || it->second.idx >= ta->rcpts.size()) continue;
        Rcpt& r = ta->rcpts[it->second.idx];
        if (r.state != RcptState::deferred || r.next_try_us != it->first) continue;
        r.state = RcptState::active;
        out.emplace_back(ta, it->second.idx);
    }
    deferred_.erase(deferred_.begin(), end);
    return out;
}

std::optional<std::uint64_t> ActiveQueue::next_due() const {
    if (deferred_.empty()) return std::nullopt;
    return deferred_.begin()->first;
}

} // namespace smx::qmgr
