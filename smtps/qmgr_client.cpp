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
        if (f->hdr.type != smx::msg::TA_ACK) {
            spdlog::error("qmgr: protocol error: unexpected record type {}", f->hdr.type);
            break;
        }
        std::string err;
        auto ack = smx::msg::decode<smx::msg::TaAck>(*f, err);
        if (!ack) {
            spdlog::error("qmgr: protocol error: bad TA_ACK: {}", err);
            break;
        }
        auto it = pending_.find(f->hdr.req_id);
        if (it == pending_.end()) {
            // The session gave up waiting (timeout) and answered 451.
            spdlog::warn("{}: late TA_ACK from qmgr ignored", ack->ta_id);
            continue;
        }
        it->second->ack = std::move(*ack);
        it->second->timer->cancel();
        pending_.erase(it);
    }
    const bool was = connected_;
    connected_ = false;
    ch_->close();
    fail_all();
    if (was && on_lost_) on_lost_();
}

void QmgrClient::fail_all() {
    for (auto& [id, w] : pending_) w->timer->cancel();
    pending_.clear();
}

asio::awaitable<std::optional<smx::msg::TaAck>> QmgrClient::commit(
    const smx::msg::TaCommit& ta) {
    if (!connected_) co_return std::nullopt;
    asio::steady_timer timer(co_await asio::this_coro::executor, ack_timeout_);
    Waiter w{&timer, std::nullopt};
    const std::uint64_t req = ++next_req_;
    pending_.emplace(req, &w);
    ch_->send(smx::msg::encode(ta, req));
    co_await timer.async_wait(smx::await_tuple);
    pending_.erase(req);
    if (!w.ack && connected_) spdlog::warn("{}: no TA_ACK from qmgr in time", ta.ta_id);
    if (w.ack) smx::test_panic_point("ta_ack");
    co_return std::move(w.ack);
}

} // namespace smx::smtps
