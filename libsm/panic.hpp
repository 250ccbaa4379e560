// Crash-only handling of bugs, one policy for every smx process.
//
// A bug (an impossible state, an exception nobody expected) must not leave a
// process limping on half-dead: it is logged, the log is flushed, and the
// process aborts. The MCP restarts it and recovery makes that safe.
// Expected errors (EOF, timeouts, a peer's 4xx, a bad record from a peer)
// are values, never exceptions, and never reach these functions.
#pragma once

#include <exception>
#include <string_view>

namespace smx {

// A bug: logs "panic: what", flushes the log and aborts (core dump).
[[noreturn]] void panic(std::string_view what);

// An environment failure the process cannot work around (a Berkeley DB
// panic, a store that cannot be written): logs "fatal: what", flushes the
// log and exits 1, so that the MCP restarts the process.
[[noreturn]] void fatal(std::string_view what);

// panic() naming the exception e (from std::current_exception or co_spawn).
[[noreturn]] void panic_exception(std::string_view where, std::exception_ptr e);

// The completion handler for every asio::co_spawn in smx: a coroutine that
// ends with an exception is a bug, so the process panics, naming `where`.
// Used instead of asio::detached, which would drop the exception unseen.
struct CrashOnException {
    std::string_view where;
    template <class... Result>
    void operator()(std::exception_ptr e, Result&&...) const {
        if (e) panic_exception(where, e);
    }
};
inline CrashOnException crash_on_exception(std::string_view where) { return {where}; }

// Runs an io_context (or anything with run()) until it stops; an exception
// thrown out of a handler is a bug and panics.
template <class Io>
void run_or_panic(Io& io, std::string_view where) {
    try {
        io.run();
    } catch (...) {
        panic_exception(where, std::current_exception());
    }
}

// Installs std::terminate and the test-build fault hook (SMX_TEST_PANIC):
// call first thing in main of every daemon.
void install_crash_handlers(std::string_view process);

// Test builds only: when the environment variable SMX_TEST_PANIC names this
// point ("process:point"), the process panics there, so that a test can show
// that a bug is logged, the process restarted and nothing is lost. With
// SMX_TEST_PANIC_ONCE=FILE it fires once only (the file records that).
void test_panic_point(std::string_view point);

} // namespace smx
