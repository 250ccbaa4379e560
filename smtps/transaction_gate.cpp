#include "smtps/transaction_gate.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

namespace smx::smtps {
namespace {
constexpr auto warn_every = std::chrono::seconds(60);
} // namespace

asio::awaitable<TransactionGate::Slot> TransactionGate::enter(
    std::size_t limit, std::chrono::steady_clock::duration wait) {
    if (Slot now = try_enter(limit)) co_return now;
    // The gate outlives our place in waiters_, also when the loop is torn
    // down (its Server first) with this coroutine still waiting.
    const auto self = shared_from_this();
    asio::steady_timer timer(co_await asio::this_coro::executor, wait);
    Waiter w{&timer};
    const auto it = waiters_.insert(waiters_.end(), &w);
    // Unlinked however the wait ends.
    struct Unlink {
        std::list<Waiter*>& l;
        std::list<Waiter*>::iterator it;
        bool& granted;
        ~Unlink() {
            if (!granted) l.erase(it);
        }
    } unlink{waiters_, it, w.granted};
    co_await timer.async_wait(smx::await_tuple);
    // Granted: leave() passed its place on (open_ stays). Else the wait is
    // over and the transaction goes ahead over the limit.
    if (!w.granted) {
        ++open_;
        ++overruns_;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_warn_ >= warn_every) {
            spdlog::warn("smtp: {} transactions open, {} MAIL commands waiting: a MAIL went ahead "
                         "over server.max_transactions after waiting server.transaction_wait_ms "
                         "({} times in all)",
                         open_ - 1, waiters_.size() - 1, overruns_);
            last_warn_ = now;
        }
    }
    co_return Slot(self);
}

void TransactionGate::leave() {
    if (open_ == 0) smx::panic("transaction gate: a transaction ended that was never open");
    // Hand the place to the first waiter, while the limit still allows it
    // (open_ may be over it after overruns or a lowered limit).
    if (!waiters_.empty() && (limit_ == 0 || open_ <= limit_)) {
        Waiter* w = waiters_.front();
        waiters_.pop_front();
        w->granted = true;
        w->timer->cancel();
        return;
    }
    --open_;
}

} // namespace smx::smtps
