#pragma once
// The co_spawn completion for the unit tests' coroutines: an exception that
// ends one comes out of io_context::run(), so the test fails naming it.
// asio::detached would drop it, and the test could pass on what it never
// checked.

#include <exception>

namespace smx_test {

struct Rethrow {
    template <class... Result>
    void operator()(std::exception_ptr e, Result&&...) const {
        if (e) std::rethrow_exception(e);
    }
};
inline constexpr Rethrow rethrow{};

} // namespace smx_test
