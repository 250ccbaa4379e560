// The completion token of an awaited asio operation.
#pragma once

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/deferred.hpp>

namespace sm {

// The outcome comes back as a tuple (expected errors are values), and the
// awaiting coroutine starts the operation itself. With use_awaitable asio
// starts each operation from a coroutine of its own
// (async_result<use_awaitable_t>::initiate): one heap frame more per read,
// write and wait. Operands of awaitable operators (a || b) still need
// use_awaitable, and so does awaiting co_spawn: asio 1.81 cannot resume a
// deferred completion of (exception_ptr, T).
inline constexpr auto await_tuple = boost::asio::as_tuple(boost::asio::deferred);

} // namespace sm
