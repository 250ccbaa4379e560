// The DEFEDB strand: every DEFEDB call runs on one strand of the worker pool,
// in the order QMGR made it (a presence check sees every removal made before
// it), never on the event loop; the caller co_awaits the result. The only
// owner of that ordering.
#pragma once

#include "qmgr/coro.hpp"
#include "qmgr/defedb.hpp"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>
#include <optional>
#include <string>
#include <utility>

namespace smx::qmgr {

namespace asio = boost::asio;

// A panicked DEFEDB environment: exit, the MCP restarts QMGR and the open
// runs recovery. Everything acked is durable by then.
[[noreturn]] void defedb_fatal(const std::string& what);

class DefedbStrand {
public:
    DefedbStrand(asio::thread_pool& workers, Defedb& defedb)
        : strand_(asio::make_strand(workers.get_executor())), defedb_(defedb) {}

    // Runs work(defedb) on the strand and resumes the caller with its result,
    // or nullopt when DEFEDB threw (logged; a fatal error exits).
    template <class F>
    auto run(F work) -> asio::awaitable<std::optional<std::invoke_result_t<F&, Defedb&>>> {
        using T = std::invoke_result_t<F&, Defedb&>;
        auto job = [d = &defedb_, work = std::move(work)]() mutable { return guarded<T>(work, *d); };
        co_return co_await run_on(strand_, std::move(job));
    }

private:
    template <class T, class F>
    static std::optional<T> guarded(F& work, Defedb& db) {
        try {
            return work(db);
        } catch (const DefedbError& e) {
            if (e.fatal()) defedb_fatal(e.what());
            spdlog::error("defedb: {}", e.what());
        }
        return std::nullopt;
    }

    asio::strand<asio::thread_pool::executor_type> strand_;
    Defedb& defedb_;
};

} // namespace smx::qmgr
