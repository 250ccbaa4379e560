#include "smtps/qmgr_client.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

namespace smx::smtps {

QmgrClient::QmgrClient(asio::any_io_executor ex, std::shared_ptr<smx::Channel> ch,
                       std::chrono::steady_clock::duration ack_timeout,
                       std::function<void()> on_lost)
    : ex_(std::move(ex)), ch_(std::move(ch)), ack_timeout_(ack_timeout), on_lost_(std::move(on_lost)) {}

void QmgrClient::start() {
    asio::co_spawn(ex_, reader(), smx::crash_on_exception("smtps qmgr reader"));
}

void QmgrClient::close() {
    connected_ = false;
    ch_->close();
}

asio::awaitable<void> QmgrClient::reader() {
    while (auto f = co_await ch_->read()) {
        if (!answer(*f)) break;
    }
    const bool was = connected_;
    connected_ = false;
    ch_->close();
    fail_all();
    if (was && on_lost_) on_lost_();
}

bool QmgrClient::answer(const smx::rec::Frame& f) {
    const auto type = f.hdr.type;
    if (type != smx::msg::TA_ACK && type != smx::msg::ANVIL_REPLY) {
        spdlog::error("qmgr: protocol error: unexpected record type {}", type);
        return false;
    }
    std::string err;
    std::optional<smx::msg::TaAck> ack;
    std::optional<smx::msg::AnvilReply> anvil;
    if (type == smx::msg::TA_ACK) ack = smx::msg::decode<smx::msg::TaAck>(f, err);
    else anvil = smx::msg::decode<smx::msg::AnvilReply>(f, err);
    if (!ack && !anvil) {
        spdlog::error("qmgr: protocol error: bad record of type {}: {}", type, err);
        return false;
    }
    auto it = pending_.find(f.hdr.req_id);
    if (it == pending_.end()) {
        // The session gave up waiting (timeout) and went on.
        if (ack) spdlog::warn("{}: late TA_ACK from qmgr ignored", ack->ta_id);
        else spdlog::warn("late ANVIL_REPLY from qmgr ignored");
        return true;
    }
    Waiter& w = *it->second;
    if (w.expects != type) {
        spdlog::error("qmgr: protocol error: record type {} answers a request of type {}", type,
                      static_cast<int>(w.expects));
        return false;
    }
    w.ack = std::move(ack);
    w.anvil = anvil;
    w.timer->cancel();
    pending_.erase(it);
    return true;
}

void QmgrClient::fail_all() {
    for (auto& [id, w] : pending_) w->timer->cancel();
    pending_.clear();
}

asio::awaitable<void> QmgrClient::ask(std::uint64_t req, std::string frame, Waiter& w,
                                      std::chrono::steady_clock::duration timeout) {
    w.timer->expires_after(timeout);
    pending_.emplace(req, &w);
    ch_->send(std::move(frame));
    co_await w.timer->async_wait(smx::await_tuple);
    pending_.erase(req);
}

asio::awaitable<std::optional<smx::msg::TaAck>> QmgrClient::commit(
    const smx::msg::TaCommit& ta) {
    if (!connected_) co_return std::nullopt;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    Waiter w{&timer, smx::msg::TA_ACK, std::nullopt, std::nullopt};
    const std::uint64_t req = ++next_req_;
    co_await ask(req, smx::msg::encode(ta, req), w, ack_timeout_);
    if (!w.ack && connected_) spdlog::warn("{}: no TA_ACK from qmgr in time", ta.ta_id);
    if (w.ack) smx::test_panic_point("ta_ack");
    co_return std::move(w.ack);
}

asio::awaitable<std::optional<smx::msg::AnvilReply>> QmgrClient::anvil(
    const smx::msg::AnvilRequest& r, std::chrono::steady_clock::duration timeout) {
    if (!connected_) co_return std::nullopt;
    asio::steady_timer timer(co_await asio::this_coro::executor);
    Waiter w{&timer, smx::msg::ANVIL_REPLY, std::nullopt, std::nullopt};
    const std::uint64_t req = ++next_req_;
    co_await ask(req, smx::msg::encode(r, req), w, timeout);
    co_return w.anvil;
}

} // namespace smx::smtps
