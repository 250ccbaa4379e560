// QMGR's coroutine plumbing: blocking work on the worker pool awaited from
// the event loop (SMTPS's ContentWriter::commit does the same), and the group of
// coroutines a component runs, so that shutdown can wait until each has
// exited before the pool and the io_context go (qmgr/main.cpp).
#pragma once

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <boost/asio.hpp>
#include <cstddef>
#include <memory>
#include <string_view>
#include <type_traits>
#include <utility>

namespace smx::qmgr {

namespace asio = boost::asio;

using smx::run_on;

// The coroutines one component has started and not yet seen exit. Each is
// spawned with smx::crash_on_exception and starts in a later event-loop turn,
// never inside its caller (co_spawn alone would run it at once when called
// on the loop): what the caller does next in this turn is seen by it, e.g.
// the rest of a RESULT's deferrals join the batch. The count lives in shared
// memory so that a frame destroyed late (a test dropping its io_context)
// touches nothing that is gone.
class Coroutines {
public:
    void spawn(const asio::any_io_executor& ex, asio::awaitable<void> a, std::string_view where) {
        ++*live_;
        asio::co_spawn(ex, counted(ex, live_, std::move(a)), smx::crash_on_exception(where));
    }
    bool idle() const { return *live_ == 0; }

private:
    static asio::awaitable<void> counted(asio::any_io_executor ex,
                                         std::shared_ptr<std::size_t> live,
                                         asio::awaitable<void> a) {
        struct Exit {
            std::shared_ptr<std::size_t> live;
            ~Exit() { --*live; }
        } exit{std::move(live)};
        co_await asio::post(ex, asio::deferred);
        co_await std::move(a);
    }

    std::shared_ptr<std::size_t> live_ = std::make_shared<std::size_t>(0);
};

} // namespace smx::qmgr
