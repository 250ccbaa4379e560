// How many mail transactions (MAIL to its reply after the content) an event
// loop runs at once. Past the limit a MAIL waits for one to end, at most
// `wait`: with more clients than the CPU and disk can serve together, the
// queue forms before a transaction instead of between a message's last
// byte and its 250 (postfix's smtpd process limit does the same with the
// listen backlog). A client holding transactions open cannot lock others
// out: past `wait` a MAIL goes ahead over the limit.
#pragma once

#include <boost/asio.hpp>
#include <chrono>
#include <cstddef>
#include <list>
#include <memory>

namespace smx::smtps {

namespace asio = boost::asio;

class TransactionGate : public std::enable_shared_from_this<TransactionGate> {
public:
    // Releases its transaction's place when it goes (reset or destroyed).
    class Slot {
    public:
        Slot() = default;
        explicit Slot(std::shared_ptr<TransactionGate> g) : gate_(std::move(g)) {}
        Slot(Slot&&) = default;
        Slot& operator=(Slot&& o) noexcept {
            reset();
            gate_ = std::move(o.gate_);
            return *this;
        }
        ~Slot() { reset(); }
        void reset() {
            if (auto g = std::move(gate_)) g->leave();
        }
        explicit operator bool() const { return gate_ != nullptr; }

    private:
        std::shared_ptr<TransactionGate> gate_;
    };

    // A place among `limit` (0: no limit) when one is free now, else an
    // empty Slot. Call on the gate's loop only (and so for enter).
    Slot try_enter(std::size_t limit) {
        limit_ = limit;
        if (full(limit)) return Slot();
        ++open_;
        return Slot(shared_from_this());
    }
    // A place among `limit`; waits while the others take them all, at most
    // `wait`.
    asio::awaitable<Slot> enter(std::size_t limit, std::chrono::steady_clock::duration wait);

    // Whether enter(limit, ...) would wait now.
    bool full(std::size_t limit) const { return limit != 0 && open_ >= limit; }
    std::size_t open() const { return open_; }
    std::size_t waiting() const { return waiters_.size(); }

private:
    struct Waiter {
        asio::steady_timer* timer;
        bool granted = false;
    };
    void leave();

    std::size_t open_ = 0;
    std::size_t limit_ = 0;  // the last enter()'s: a reload may change it
    std::list<Waiter*> waiters_;  // in arrival order
    unsigned long overruns_ = 0;  // MAILs that went ahead over the limit
    std::chrono::steady_clock::time_point last_warn_{};
};

} // namespace smx::smtps
