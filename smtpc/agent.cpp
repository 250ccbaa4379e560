#include "agent.hpp"

#include <spdlog/spdlog.h>

namespace smtpc {
namespace {

asio::awaitable<void> run_delivery(std::shared_ptr<sm::Channel> ch, Deliverer& del,
                                   sm::msg::Deliver d) {
    sm::msg::Result r;
    try {
        r = co_await del.deliver(d);
    } catch (const std::exception& e) {
        // QMGR must still hear about every recipient, or it waits forever.
        spdlog::error("{}: delivery failed: {}", d.ta_id, e.what());
        r = fail_all(d, {451, "4.3.0", std::string("internal error in smtpc: ") + e.what()});
    }
    ch->send(sm::msg::encode(r));
}

} // namespace

asio::awaitable<void> serve_qmgr(std::shared_ptr<sm::Channel> ch, Deliverer& del) {
    auto ex = co_await asio::this_coro::executor;
    for (;;) {
        auto f = co_await ch->read();
        if (!f) co_return;
        if (f->hdr.type != sm::msg::DELIVER) {
            spdlog::error("qmgr: protocol error: unexpected record type {}", f->hdr.type);
            ch->close();
            co_return;
        }
        std::string err;
        auto d = sm::msg::decode<sm::msg::Deliver>(*f, err);
        if (!d) {
            spdlog::error("qmgr: protocol error: bad DELIVER: {}", err);
            ch->close();
            co_return;
        }
        spdlog::debug("{}: deliver da_id={} nrcpt={}", d->ta_id, d->da_id, d->rcpts.size());
        asio::co_spawn(ex, run_delivery(ch, del, std::move(*d)), asio::detached);
    }
}

} // namespace smtpc
