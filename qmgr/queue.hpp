// The active queue (AQ): the transactions QMGR holds in memory, with
// per-recipient state. A deferred recipient lives in DEFEDB, not here; a
// transaction leaves memory once no recipient needs it here.
// Single-threaded: only the io_context thread touches it.
#pragma once

#include "messages.hpp"

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::qmgr {

// Recipient life cycle in memory:
//   active → inflight → done | bounced (via bouncing) | deferred (via moving)
// moving: being written to DEFEDB; deferred: DEFEDB holds it (or it is not
// ours to track); bouncing: waiting for its DSN to be durable.
// done, bounced and deferred are closed for memory: nothing here waits on them.
enum class RcptState : std::uint8_t { active, inflight, moving, deferred, bouncing, done, bounced };

const char* to_string(RcptState s);
inline bool is_closed(RcptState s) {
    return s == RcptState::done || s == RcptState::bounced || s == RcptState::deferred;
}

struct Rcpt {
    std::string addr;
    RcptState state = RcptState::active;
    std::uint32_t attempts = 0;
    std::string last_error;
    bool from_defedb = false;  // its durable record is in DEFEDB, not IBDB
    bool hold = false;         // `smx hold` while in flight: park it held
    bool warned = false;       // its sender got the delay warning
};

struct Ta {
    std::string id;
    std::shared_ptr<const sm::msg::TaCommit> env;  // for DEFEDB and DSNs
    std::vector<Rcpt> rcpts;
    std::uint32_t open = 0;        // recipients not closed
    bool durable = false;          // its IBDB record is on disk
    bool touched_defedb = false;   // DEFEDB may hold recipients we don't track
    bool deleted = false;          // `smx delete`: results are dropped
    std::uint32_t sched_jobs = 0;  // scheduler jobs waiting that point here

    const std::string& sender() const { return env->sender; }
    const std::string& cdb_id() const { return env->cdb_id; }
    std::uint64_t size() const { return env->size; }
    std::uint64_t arrival_us() const { return env->arrival_us; }
};

class ActiveQueue {
public:
    // Adds a transaction with every recipient in state `initial`; nullptr
    // when the id is already queued.
    Ta* add(const sm::msg::TaCommit& env, RcptState initial = RcptState::active);
    Ta* find(const std::string& id);
    void erase(const std::string& id);

    // Moves a recipient to a closed state; returns true when it was the last
    // open one. Reopen brings a closed one back (from DEFEDB).
    bool close(Ta& ta, std::uint32_t idx, RcptState closed_state);
    void reopen(Ta& ta, std::uint32_t idx);

    template <class F>
    void for_each(F&& f) const {
        for (const auto& [id, ta] : tas_) f(*ta);
    }

    std::size_t transactions() const { return tas_.size(); }
    std::size_t rcpts() const { return rcpts_; }  // open recipients in memory

private:
    std::unordered_map<std::string, std::unique_ptr<Ta>> tas_;
    std::size_t rcpts_ = 0;
};

} // namespace smx::qmgr
