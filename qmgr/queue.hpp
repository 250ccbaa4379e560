// The active queue (IQDB/AQ): every transaction QMGR holds in memory, with
// per-recipient state, and the index of deferred recipients by next try.
// Single-threaded: only the io_context thread touches it.
#pragma once

#include "messages.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace smx::qmgr {

// Recipient life cycle. done and bounced are final; deferred waits for
// next_try (in memory now, in DEFEDB later); held waits for `smx release`.
enum class RcptState : std::uint8_t { active, inflight, deferred, done, bounced, held };

const char* to_string(RcptState s);
inline bool is_final(RcptState s) { return s == RcptState::done || s == RcptState::bounced; }

struct Rcpt {
    std::string addr;
    RcptState state = RcptState::active;
    std::uint32_t attempts = 0;
    std::string last_error;
    std::uint64_t next_try_us = 0;  // unix µs, meaningful when deferred
};

struct Ta {
    std::string id;
    std::string sender;
    std::string cdb_id;
    std::uint64_t size = 0;
    std::uint64_t arrival_us = 0;
    std::vector<Rcpt> rcpts;
    std::uint32_t open = 0;   // recipients not final
    bool durable = false;     // its IBDB record is on disk
};

// One recipient of one transaction, as the deferred index names it.
struct RcptRef {
    std::string ta_id;
    std::uint32_t idx = 0;
};

class ActiveQueue {
public:
    // Adds a transaction with every recipient active; nullptr when the id is
    // already queued.
    Ta* add(const sm::msg::TaCommit& env);
    Ta* find(const std::string& id);
    void erase(const std::string& id);

    // Marks a recipient final; returns true when it was the last open one.
    bool finish(Ta& ta, std::uint32_t idx, RcptState final_state);

    // Puts a recipient on the deferred index until next_try_us.
    void defer(Ta& ta, std::uint32_t idx, std::uint64_t next_try_us);
    // Removes the deferred recipients due at now_us and returns them, active
    // again, in due order.
    std::vector<std::pair<Ta*, std::uint32_t>> take_due(std::uint64_t now_us);
    std::optional<std::uint64_t> next_due() const;

    std::size_t transactions() const { return tas_.size(); }
    std::size_t rcpts() const { return rcpts_; }  // recipients in memory
    std::size_t deferred() const { return deferred_.size(); }

private:
    std::unordered_map<std::string, std::unique_ptr<Ta>> tas_;
    std::size_t rcpts_ = 0;
    // Entries go stale when a recipient leaves the deferred state another
    // way (flush, delete); take_due() checks before returning one.
    std::multimap<std::uint64_t, RcptRef> deferred_;
};

} // namespace smx::qmgr
