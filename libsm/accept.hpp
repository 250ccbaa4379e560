// One accept loop step for every listener (SMTP, QMGR's socket, metrics).
// Accept errors never spin: they back off (100 ms doubling to 1 s) and are
// logged at most once per 10 s with a count. Out of descriptors (EMFILE,
// ENFILE), a spare descriptor kept for the purpose is given up for a moment
// so that the waiting client can be taken, told so (`refusal`) and shut down
// at once, instead of hanging in the backlog (the libev/nginx "spare fd"
// trick); its socket is kept as the next spare. Every accept of the process
// (SMTPS has one listener per event loop, each in its own thread) shares one
// lock, and such a refusal holds it alone: the slot a spare gives up goes to
// the client it is given up for, never to another loop's accept. Accepts
// share it without waiting for each other (a mutex there put a loop to sleep
// on about every fourth connection at 2 loops).
#pragma once

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <mutex>
#include <shared_mutex>
#include <optional>
#include <string>

namespace smx {

namespace asio = boost::asio;

class AcceptGuard {
public:
    // `what` names the listener in the log; `refusal` is written to a client
    // turned away for want of descriptors (may be empty: just close).
    AcceptGuard(std::string what, std::string refusal);
    ~AcceptGuard();
    AcceptGuard(const AcceptGuard&) = delete;
    AcceptGuard& operator=(const AcceptGuard&) = delete;

    // The next connection; nullopt once the acceptor is closed. peer, when
    // given, gets the client's address from the accept itself.
    template <class Acceptor>
    asio::awaitable<std::optional<typename Acceptor::protocol_type::socket>> next(
        Acceptor& a, typename Acceptor::endpoint_type* peer = nullptr);

    unsigned long refused() const { return refused_; }

private:
    // After a failed accept: true when the spare let us turn a client away
    // (try again at once), false when the caller must wait pause() first.
    bool on_error(int native_listener, const boost::system::error_code& ec);
    std::chrono::milliseconds pause();
    // Another thread may take the slot a spare gave up before our accept
    // does; the spare is then gone until a descriptor is free again.
    void restore_spare() {
        if (spare_ < 0) spare_ = open_spare();
    }
    static int open_spare();
    void warn(const boost::system::error_code& ec);
    static std::shared_mutex accepting_;

    std::string what_, refusal_;
    int spare_ = -1;
    std::chrono::milliseconds backoff_{0};
    std::chrono::steady_clock::time_point last_warn_{};
    unsigned long errors_since_warn_ = 0;
    unsigned long refused_ = 0;
};

template <class Acceptor>
asio::awaitable<std::optional<typename Acceptor::protocol_type::socket>> AcceptGuard::next(
    Acceptor& a, typename Acceptor::endpoint_type* peer) {
    // Accept without blocking under accepting_ (an async_accept would accept
    // in the reactor, outside the lock), and wait for readiness only when
    // no client is waiting: under load one usually is, and the wait costs
    // asio an EPOLL_CTL_MOD each time.
    if (!a.non_blocking()) a.non_blocking(true);
    for (;;) {
        if (!a.is_open()) co_return std::nullopt;
        boost::system::error_code ec;
        std::shared_lock lock(accepting_);
        typename Acceptor::endpoint_type from;
        auto s = a.accept(from, ec);
        if (!ec) {
            lock.unlock();
            backoff_ = std::chrono::milliseconds(0);
            restore_spare();
            if (peer) *peer = from;
            co_return std::move(s);
        }
        if (ec == asio::error::would_block || ec == asio::error::try_again) {
            lock.unlock();
            auto [wec] =
                co_await a.async_wait(Acceptor::wait_read, smx::await_tuple);
            if (wec == asio::error::operation_aborted) co_return std::nullopt;
            continue;
        }
        lock.unlock();
        if (ec == asio::error::operation_aborted || !a.is_open()) co_return std::nullopt;
        std::unique_lock alone(accepting_);
        const bool refused = on_error(a.native_handle(), ec);
        alone.unlock();
        if (refused) continue;
        asio::steady_timer t(co_await asio::this_coro::executor, pause());
        co_await t.async_wait(smx::await_tuple);
        if (!a.is_open()) co_return std::nullopt;
    }
}

} // namespace smx
