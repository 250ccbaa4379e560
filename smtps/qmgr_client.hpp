// SMTPS's single channel to QMGR. Sessions send TA_COMMIT and wait for the
// TA_ACK with the same request id, or ANVIL_REQ and wait for its
// ANVIL_REPLY; a reader coroutine matches the answers to the waiting
// sessions.
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
    // QMGR's anvil counts, or nullopt when none came within timeout or
    // QMGR is gone.
    asio::awaitable<std::optional<smx::msg::AnvilReply>> anvil(
        const smx::msg::AnvilRequest& r, std::chrono::steady_clock::duration timeout);
    // One-way: QMGR answers nothing.
    void report(const smx::msg::SmtpsLoad& load) { ch_->send(smx::msg::encode(load)); }
    void tell(const smx::msg::AnvilRequest& r) { ch_->send(smx::msg::encode(r)); }

private:
    struct Waiter {
        asio::steady_timer* timer;
        smx::msg::Type expects;
        std::optional<smx::msg::TaAck> ack;
        std::optional<smx::msg::AnvilReply> anvil;
    };
    // Sends frame as request req and waits for its answer into w, at most timeout.
    asio::awaitable<void> ask(std::uint64_t req, std::string frame, Waiter& w,
                              std::chrono::steady_clock::duration timeout);
    // Decodes an answer into the waiter that expects it: false on a protocol error.
    bool answer(const smx::rec::Frame& f);
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
