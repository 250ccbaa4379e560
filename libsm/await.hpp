// The completion token of an awaited asio operation.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/deferred.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <type_traits>
#include <utility>

namespace smx {

// The outcome comes back as a tuple (expected errors are values), and the
// awaiting coroutine starts the operation itself. With use_awaitable asio
// starts each operation from a coroutine of its own
// (async_result<use_awaitable_t>::initiate): one heap frame more per read,
// write and wait. Operands of awaitable operators (a || b) still need
// use_awaitable, and so does awaiting co_spawn: asio 1.81 cannot resume a
// deferred completion of (exception_ptr, T).
inline constexpr auto await_tuple = boost::asio::as_tuple(boost::asio::deferred);

// Runs f() on ex (a worker pool, or a strand of it) and resumes the caller
// on its own executor with the result (QMGR's blocking work, smx-pickup's
// file work). An exception from f reaches the caller.
//
// GCC 12 destroys the captures of a lambda made inside a co_await
// expression twice (asio issue 858): name the lambda first, then
// co_await run_on(ex, std::move(job)), as here and in SMTPS's ContentWriter.
template <class Executor, class F>
boost::asio::awaitable<std::invoke_result_t<F&>> run_on(Executor ex, F f) {
    using R = std::invoke_result_t<F&>;
    auto job = [f = std::move(f)]() mutable -> boost::asio::awaitable<R> { co_return f(); };
    co_return co_await boost::asio::co_spawn(std::move(ex), std::move(job),
                                             boost::asio::use_awaitable);
}

} // namespace smx
