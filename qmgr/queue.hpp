// The active queue (AQ): the transactions QMGR holds in memory, with
// per-recipient state. A deferred recipient lives in DEFEDB, not here; a
// transaction leaves memory once no recipient needs it here.
//
// This is the one owner of recipient and transaction state: every change goes
// through a named transition below, which checks the source state and panics
// on an impossible one (as OpenSMTPD's scheduler_ramqueue.c calls fatalx and
// postfix's qmgr msg_panic). Everything else reads through const accessors.
// Single-threaded: only the io_context thread touches it.
//
// Recipient transitions (state x event -> state; anything else panics):
//
//   from \ event | dispatch requeue sent  defer_begin deferred bounce_begin bounce_failed bounced due    drop
//   -------------+-------------------------------------------------------------------------------------------
//   active       | inflight    -     -     moving        -      bouncing       -            -      -     done
//   inflight     |    -      active done   moving        -      bouncing       -            -      -     done
//   moving       |    -        -     -       -       deferred     -            -            -      -     done
//   bouncing     |    -        -     -       -           -        -          moving      bounced   -      -
//   deferred     |    -        -     -       -           -        -            -            -    active   -
//   untracked    |    -        -     -       -           -        -            -            -    active   -
//   done,bounced |    -        -     -       -           -        -            -            -      -      -
//
//   dispatch      the scheduler hands it to SMTPC
//   requeue       its SMTPC link was lost: it waits in its queue again
//   sent          2xx
//   defer_begin   failed for now (or held): being written to DEFEDB
//   deferred      DEFEDB holds it (durable)
//   bounce_begin  failed for good: waiting for its DSN to be durable
//   bounce_failed the DSN could not be written: it goes to DEFEDB instead
//   bounced       the DSN is durable (or none is sent)
//   due           DEFEDB hands it back (next try reached, leased)
//   drop          `smx delete`: only on a transaction marked deleted
//
// done, bounced, deferred and untracked are closed: nothing in memory waits
// on them; a transaction with no open recipient may be retired.
#pragma once

#include "libsm/clock.hpp"
#include "libsm/messages.hpp"
#include "qmgr/defedb.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::qmgr {

// moving: being written to DEFEDB; deferred: DEFEDB holds it; bouncing:
// waiting for its DSN to be durable; untracked: a transaction rebuilt from
// DEFEDB knows only the recipients DEFEDB gave it, the others are untracked.
enum class RcptState : std::uint8_t {
    active, inflight, moving, deferred, bouncing, done, bounced, untracked
};
enum class RcptEvent : std::uint8_t {
    dispatch, requeue, sent, defer_begin, deferred, bounce_begin, bounce_failed, bounced, due, drop
};

const char* to_string(RcptState s);
const char* to_string(RcptEvent e);
inline bool is_closed(RcptState s) {
    return s == RcptState::done || s == RcptState::bounced || s == RcptState::deferred ||
           s == RcptState::untracked;
}
// The transition table above: the state `ev` leads to from `from`, or
// nullopt when the event is impossible there.
std::optional<RcptState> next_state(RcptState from, RcptEvent ev);

class Rcpt {
public:
    explicit Rcpt(std::string addr, RcptState s) : addr_(std::move(addr)), state_(s) {}
    const std::string& addr() const { return addr_; }
    RcptState state() const { return state_; }
    std::uint32_t attempts() const { return attempts_; }
    // The last failure: the server's reply (or our own reason) and the
    // "host[ip]:port" that gave it (empty: no server replied).
    const smx::msg::Reply& last_reply() const { return last_reply_; }
    const std::string& last_relay() const { return last_relay_; }
    bool from_defedb() const { return from_defedb_; }  // its durable record is in DEFEDB
    bool hold() const { return hold_; }                // `smx hold` while out: park it held
    bool warned() const { return warned_; }            // its sender got the delay warning

private:
    friend class ActiveQueue;
    std::string addr_;
    RcptState state_;
    std::uint32_t attempts_ = 0;
    smx::msg::Reply last_reply_;
    std::string last_relay_;
    bool from_defedb_ = false;
    bool hold_ = false;
    bool warned_ = false;
};

// The scheduler's count of its jobs that point at a transaction: stored with
// the transaction (so forgetting one is cheap) but only the scheduler writes it.
class SchedRefs {
public:
    bool any() const { return n_ != 0; }

private:
    friend class Scheduler;
    std::uint32_t n_ = 0;
};

class Ta {
public:
    Ta(std::string id, std::shared_ptr<const smx::msg::TaCommit> env)
        : id(std::move(id)), env(std::move(env)) {}
    const std::string id;
    const std::shared_ptr<const smx::msg::TaCommit> env;  // for DEFEDB and DSNs
    SchedRefs sched;

    const std::vector<Rcpt>& rcpts() const { return rcpts_; }
    const Rcpt& rcpt(std::uint32_t idx) const { return rcpts_.at(idx); }
    std::uint32_t open() const { return open_; }  // recipients not closed
    bool touched_defedb() const { return touched_defedb_; }  // DEFEDB may hold some of it
    bool deleted() const { return deleted_; }  // `smx delete`: results are dropped

    const std::string& sender() const { return env->sender; }
    const std::string& content_id() const { return env->content_id; }
    std::uint64_t size() const { return env->size; }
    std::uint64_t arrival_us() const { return env->arrival_us; }
    // When it came into memory this time (intake, recovery, due from DEFEDB).
    std::uint64_t active_us() const { return active_us_; }

private:
    friend class ActiveQueue;
    std::vector<Rcpt> rcpts_;
    std::uint64_t active_us_ = 0;
    std::uint32_t open_ = 0;
    bool touched_defedb_ = false;
    bool deleted_ = false;
};

class ActiveQueue {
public:
    explicit ActiveQueue(const smx::Clock& clock = smx::system_clock()) : clock_(clock) {}

    // New transactions; nullptr when the id is already queued.
    // From SMTPS (or a DSN): every recipient active.
    Ta* admit(const smx::msg::TaCommit& env);
    // From IBDB at start-up: done and deferred (DEFEDB holds it) as IBDB
    // says, the rest active.
    Ta* admit_recovered(const smx::msg::TaCommit& env, const std::vector<bool>& done,
                        const std::vector<bool>& deferred);
    // From DEFEDB (due): every recipient untracked until `due` reopens it.
    Ta* admit_untracked(const smx::msg::TaCommit& env);

    Ta* find(const std::string& id);
    // A transaction with no open recipient leaves memory.
    void retire(Ta& ta);
    // A transaction whose IBDB record was never written leaves memory; none
    // of its recipients can have been dispatched or bounced.
    void abandon(const std::string& id);

    // The transitions of the table above.
    void dispatch(Ta& ta, std::uint32_t idx);
    void requeue(Ta& ta, std::uint32_t idx);
    void sent(Ta& ta, std::uint32_t idx);
    void defer_begin(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay);
    void deferred(Ta& ta, std::uint32_t idx);  // also clears hold, marks from_defedb
    void bounce_begin(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay);
    void bounce_failed(Ta& ta, std::uint32_t idx, smx::msg::Reply why);
    void bounced(Ta& ta, std::uint32_t idx);
    void due(Ta& ta, std::uint32_t idx, const DeferredRcpt& rec);
    void drop(Ta& ta, std::uint32_t idx);

    // Attribute changes, checked like transitions.
    void count_attempt(Ta& ta, std::uint32_t idx);        // active or inflight
    void set_hold(Ta& ta, std::uint32_t idx, bool hold);  // active, inflight or moving
    void mark_warned(Ta& ta, std::uint32_t idx);          // moving, once
    void mark_deleted(Ta& ta);                            // once

    template <class F>
    void for_each(F&& f) const {
        for (const auto& [id, ta] : tas_) f(*ta);
    }

    std::size_t transactions() const { return tas_.size(); }
    std::size_t rcpts() const { return rcpts_; }  // open recipients in memory

private:
    Ta* create(const smx::msg::TaCommit& env, RcptState initial);
    Rcpt& step(Ta& ta, std::uint32_t idx, RcptEvent ev);

    const smx::Clock& clock_;
    std::unordered_map<std::string, std::unique_ptr<Ta>> tas_;
    std::size_t rcpts_ = 0;
};

} // namespace smx::qmgr
