#include "smtpc/agent.hpp"

#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

namespace smx::smtpc {
namespace {

asio::awaitable<void> run_delivery(std::shared_ptr<smx::Channel> ch, Deliverer& del,
                                   smx::msg::Deliver d) {
    // An exception here is a bug: it panics (crash_on_exception), and QMGR
    // takes the delivery back when the link drops.
    smx::test_panic_point("deliver");
    const smx::msg::Result r = co_await del.deliver(d);
    // req_id = da_id: QMGR can fail this delivery alone should it refuse it.
    ch->send(smx::msg::encode(r, r.da_id));
}

} // namespace

asio::awaitable<void> serve_qmgr(std::shared_ptr<smx::Channel> ch, Deliverer& del) {
    auto ex = co_await asio::this_coro::executor;
    for (;;) {
        auto f = co_await ch->read();
        if (!f) co_return;
        if (f->hdr.type != smx::msg::DELIVER) {
            spdlog::error("qmgr: protocol error: unexpected record type {}", f->hdr.type);
            ch->close();
            co_return;
        }
        std::string err;
        auto d = smx::msg::decode<smx::msg::Deliver>(*f, err);
        if (!d) {
            spdlog::error("qmgr: protocol error: bad DELIVER: {}", err);
            ch->close();
            co_return;
        }
        spdlog::debug("{}: deliver da_id={} nrcpt={}", d->ta_id, d->da_id, d->rcpts.size());
        asio::co_spawn(ex, run_delivery(ch, del, std::move(*d)),
                       smx::crash_on_exception("smtpc delivery"));
    }
}

} // namespace smx::smtpc
