#include "libsm/panic.hpp"

#include "libsm/build_options.hpp"
#include "libsm/log.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace smx {
namespace {

std::string process_name = "smx";

// Only the first thread to panic reports; any other one waits for it to
// abort the process instead of racing it through the logger.
void enter_once() {
    static std::atomic_flag once = ATOMIC_FLAG_INIT;
    if (once.test_and_set())
        for (;;) ::pause();
}

[[noreturn]] void report_and(std::string_view kind, std::string_view what, bool abort) {
    enter_once();
    spdlog::critical("{}: {}", kind, what);
    drain_log();
    if (abort) std::abort();
    std::_Exit(1);
}

} // namespace

void panic(std::string_view what) { report_and("panic", what, true); }

void fatal(std::string_view what) { report_and("fatal", what, false); }

void panic_exception(std::string_view where, std::exception_ptr e) {
    std::string what(where);
    try {
        std::rethrow_exception(e);
    } catch (const std::exception& x) {
        what += ": uncaught exception: ";
        what += x.what();
    } catch (...) {
        what += ": uncaught exception of unknown type";
    }
    panic(what);
}

void install_crash_handlers(std::string_view process) {
    process_name = std::string(process);
    std::set_terminate([] {
        if (auto e = std::current_exception()) panic_exception("terminate", e);
        panic("std::terminate called");
    });
}

void test_panic_point([[maybe_unused]] std::string_view point) {
#if SMX_TEST_HOOKS
    static const char* want = std::getenv("SMX_TEST_PANIC");
    if (!want) return;
    const std::string here = process_name + ":" + std::string(point);
    if (here != want) return;
    // With SMX_TEST_PANIC_ONCE=FILE only the first process to get here
    // panics (the file marks it), so that the restarted one can recover.
    if (const char* once = std::getenv("SMX_TEST_PANIC_ONCE")) {
        const int fd = ::open(once, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) return;
        ::close(fd);
    }
    panic("test fault injected at " + here);
#endif
}

} // namespace smx
