// SMTPS's single channel to QMGR. Sessions send TA_COMMIT and wait for the
// TA_ACK with the same request id; a reader coroutine matches acks to the
// waiting sessions.
#pragma once

#include "libsm/channel.hpp"
#include "libsm/messages.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <unordered_map>

namespace smx::smtps {

namespace asio = boost::asio;

class QmgrClient {
public:
    QmgrClient(asio::any_io_executor ex, std::shared_ptr<smx::Channel> ch,
               std::chrono::steady_clock::duration ack_timeout, std::function<void()> on_lost);
    // Starts the reader; on_lost runs once when the channel goes away.
    void start();
    bool connected() const { return connected_; }
    std::size_t in_flight() const { return pending_.size(); }
    void close();

    // Commits a transaction: QMGR's answer, or nullopt when none came
    // (timeout, QMGR gone), in which case QMGR may or may not have it.
    asio::awaitable<std::optional<smx::msg::TaAck>> commit(const smx::msg::TaCommit& ta);
    // One-way: QMGR answers nothing.
    void report(const smx::msg::SmtpsLoad& load) { ch_->send(smx::msg::encode(load)); }

private:
    struct Waiter {
        asio::steady_timer* timer;
        std::optional<smx::msg::TaAck> ack;
    };
    asio::awaitable<void> reader();
    void fail_all();

    asio::any_io_executor ex_;
    std::shared_ptr<smx::Channel> ch_;
    std::chrono::steady_clock::duration ack_timeout_;
    std::function<void()> on_lost_;
    std::unordered_map<std::uint64_t, Waiter*> pending_;
    std::uint64_t next_req_ = 0;
    bool connected_ = true;
};

} // namespace smx::smtps
