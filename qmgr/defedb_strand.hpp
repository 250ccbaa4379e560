// The DEFEDB strand: every DEFEDB call runs on one strand of the worker pool,
// in the order QMGR made it (a presence check sees every removal made before
// it), never on the event loop. The only owner of that ordering.
#pragma once

#include "defedb.hpp"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>
#include <functional>
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
    DefedbStrand(asio::any_io_executor ex, asio::thread_pool& workers, Defedb& defedb)
        : ex_(std::move(ex)), strand_(asio::make_strand(workers.get_executor())), defedb_(defedb) {}

    // Runs work(defedb) on the strand, then done(result) on the event loop;
    // result is nullopt when DEFEDB threw (logged; a fatal error exits).
    template <class T>
    void post(std::function<T(Defedb&)> work, std::function<void(std::optional<T>)> done) {
        // The job captures no owner: it may still run while QMGR shuts down.
        asio::post(strand_, [d = &defedb_, ex = ex_, work = std::move(work),
                             done = std::move(done)]() mutable {
            auto r = guarded(work, *d);
            asio::post(ex, [done = std::move(done), r = std::move(r)]() mutable {
                done(std::move(r));
            });
        });
    }

private:
    template <class T>
    static std::optional<T> guarded(const std::function<T(Defedb&)>& work, Defedb& db) {
        try {
            return work(db);
        } catch (const DefedbError& e) {
            if (e.fatal()) defedb_fatal(e.what());
            spdlog::error("defedb: {}", e.what());
        }
        return std::nullopt;
    }

    asio::any_io_executor ex_;
    asio::strand<asio::thread_pool::executor_type> strand_;
    Defedb& defedb_;
};

} // namespace smx::qmgr
