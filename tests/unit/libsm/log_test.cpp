#include "log.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

namespace {

std::string temp_dir() {
    char tmpl[] = "/tmp/smx-log-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    return tmpl;
}

// Line i of the tests: its number and a payload of a length that varies,
// some lines longer than one write's chunk (4 KiB).
std::string payload(int i) {
    return std::string(static_cast<std::size_t>(i % 7 == 0 ? 5000 : i % 300), 'a' + i % 26);
}

// Checks that text holds lines 0..n-1 in order, each whole.
void check_lines(const std::string& text, int n) {
    std::istringstream in(text);
    std::string line;
    int next = 0;
    while (std::getline(in, line)) {
        const std::string want = "line " + std::to_string(next) + " " + payload(next);
        REQUIRE(line.size() >= want.size());
        REQUIRE(line.compare(line.size() - want.size(), want.size(), want) == 0);
        REQUIRE(line.find("smx/test[" + std::to_string(::getpid()) + "]: ") != std::string::npos);
        ++next;
    }
    REQUIRE(next == n);
}

} // namespace

TEST_CASE("log: every line reaches the file whole and in order") {
    const std::string dir = temp_dir();
    sm::LogConfig cfg;
    cfg.file = dir + "/smx.log";
    sm::init_logging("test", cfg);
    constexpr int n = 20000;
    for (int i = 0; i < n; ++i) spdlog::info("line {} {}", i, payload(i));
    sm::drain_log();
    std::ifstream f(cfg.file);
    std::stringstream all;
    all << f.rdbuf();
    check_lines(all.str(), n);
    sm::init_logging("test", sm::LogConfig{});  // closes the file
    std::filesystem::remove_all(dir);
}

TEST_CASE("log: a device that takes nothing blocks the loggers at the bound, and no line is lost") {
    const std::string dir = temp_dir();
    const std::string fifo = dir + "/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(rd >= 0);
    sm::LogConfig cfg;
    cfg.file = fifo;
    sm::init_logging("test", cfg);

    // About 5 MiB of lines: far more than the pipe (64 KiB) and the bound
    // of pending lines (1 MiB) hold.
    constexpr int n = 6000;
    std::atomic<int> logged{0};
    std::thread logger([&] {
        for (int i = 0; i < n; ++i) {
            spdlog::info("line {} {}", i, payload(i));
            logged = i + 1;
        }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(700));
    const int stalled_at = logged;
    CHECK(stalled_at > 0);
    CHECK(stalled_at < n);

    // Reading the pipe lets the logger go on; every line arrives (the
    // writer writes what is pending at least every 250 ms).
    std::string text;
    char buf[65536];
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (std::chrono::steady_clock::now() < give_up) {
        pollfd p{rd, POLLIN, 0};
        if (::poll(&p, 1, 1000) <= 0) {
            if (logged == n) break;
            continue;
        }
        const ssize_t got = ::read(rd, buf, sizeof buf);
        if (got > 0) text.append(buf, static_cast<std::size_t>(got));
    }
    logger.join();
    check_lines(text, n);
    sm::init_logging("test", sm::LogConfig{});
    ::close(rd);
    std::filesystem::remove_all(dir);
}
