#include "libsm/log.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string temp_dir() {
    char tmpl[] = "/tmp/smx-log-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    return tmpl;
}

// Line i of the tests: its number and a payload of a length that varies,
// some lines near the longest a line may be (4 KiB, one write's chunk).
std::string payload(int i) {
    return std::string(static_cast<std::size_t>(i % 7 == 0 ? 4000 : i % 300), 'a' + i % 26);
}

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream all;
    all << f.rdbuf();
    return all.str();
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) out.push_back(l);
    return out;
}

// The host name as the log writes it (up to the first dot).
std::string short_host() {
    char name[256] = {};
    REQUIRE(::gethostname(name, sizeof name - 1) == 0);
    std::string h(name);
    return h.substr(0, h.find('.'));
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
    smx::LogConfig cfg;
    cfg.file = dir + "/smx.log";
    smx::init_logging("test", cfg);
    constexpr int n = 20000;
    for (int i = 0; i < n; ++i) spdlog::info("line {} {}", i, payload(i));
    smx::drain_log();
    check_lines(read_file(cfg.file), n);
    smx::init_logging("test", smx::LogConfig{});  // closes the file
    std::filesystem::remove_all(dir);
}

TEST_CASE("log: a line of the file has syslog's shape, and postfix's level words") {
    const std::string dir = temp_dir();
    smx::LogConfig cfg;
    cfg.file = dir + "/smx.log";
    smx::init_logging("test", cfg);
    spdlog::info("ID: to=<a@b>, status=sent");
    spdlog::warn("disk low");
    spdlog::error("cannot write");
    spdlog::critical("cannot start");
    spdlog::critical("panic: impossible");
    smx::log_as(smx::LogAs::cleanup).info("ID: message-id=<x@y>");
    spdlog::info("a bell \a and an escape \x1b in it");
    spdlog::info("long {}", std::string(10000, 'x'));
    smx::drain_log();
    const auto lines = lines_of(read_file(cfg.file));
    REQUIRE(lines.size() == 8);
    const std::string who = " " + short_host() + " smx/test[" + std::to_string(::getpid()) + "]: ";
    // "Nov  4 21:00:00 host smx/test[123]: ...": seconds, the day padded
    // with a space, as syslog writes it (pflogsumm, fail2ban).
    const std::regex stamp(R"(^[A-Z][a-z]{2} [ 1-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-6][0-9] .*)");
    for (const auto& l : lines) CHECK(std::regex_match(l, stamp));
    CHECK(lines[0].substr(15) == who + "ID: to=<a@b>, status=sent");
    CHECK(lines[1].substr(15) == who + "warning: disk low");
    CHECK(lines[2].substr(15) == who + "error: cannot write");
    CHECK(lines[3].substr(15) == who + "fatal: cannot start");
    CHECK(lines[4].substr(15) == who + "panic: impossible");
    CHECK(lines[5].substr(15) ==
          " " + short_host() + " smx/cleanup[" + std::to_string(::getpid()) + "]: ID: message-id=<x@y>");
    // No control character gets into the file (a client's bytes are logged).
    CHECK(lines[6].substr(15) == who + "a bell ? and an escape ? in it");
    // A line is at most smx::max_log_line, its newline counted.
    CHECK(lines[7].size() == smx::max_log_line - 1);
    CHECK(lines[7].ends_with("xxx..."));
    smx::init_logging("test", smx::LogConfig{});
    std::filesystem::remove_all(dir);
}

TEST_CASE("log: to the journal's stream, each line with its priority and no time of ours") {
    const std::string dir = temp_dir();
    const std::string path = dir + "/journal";
    const int saved = ::dup(2);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    REQUIRE((saved >= 0 && fd >= 0));
    struct stat st{};
    REQUIRE(::fstat(fd, &st) == 0);
    REQUIRE(::dup2(fd, 2) == 2);
    ::setenv("JOURNAL_STREAM",
             (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(), 1);
    smx::LogConfig cfg;
    cfg.level = "debug";
    smx::init_logging("test", cfg);
    spdlog::debug("d");
    spdlog::info("i");
    spdlog::warn("w");
    spdlog::error("e");
    smx::drain_log();
    smx::init_logging("test", smx::LogConfig{});
    ::unsetenv("JOURNAL_STREAM");
    ::dup2(saved, 2);
    ::close(saved);
    ::close(fd);
    const std::string who = "smx/test[" + std::to_string(::getpid()) + "]: ";
    CHECK(read_file(path) == "<7>" + who + "d\n<6>" + who + "i\n<4>" + who + "warning: w\n<3>" +
                                 who + "error: e\n");
    std::filesystem::remove_all(dir);
}

TEST_CASE("log: after a rename, reopen_log_file sends the lines on to a new file") {
    const std::string dir = temp_dir();
    smx::LogConfig cfg;
    cfg.file = dir + "/smx.log";
    std::string err;
    const int fd = smx::open_log_file(cfg.file, err);
    REQUIRE(fd >= 0);
    smx::init_logging("test", cfg, fd);
    spdlog::info("before");
    smx::write_log_lines("Nov  4 21:00:00 host smx/child[1]: a child's line\n");
    smx::drain_log();
    std::filesystem::rename(cfg.file, cfg.file + ".1");
    spdlog::info("between");  // still for the renamed file
    REQUIRE(smx::reopen_log_file(cfg.file, err));
    spdlog::info("after");
    smx::drain_log();
    const std::string old = read_file(cfg.file + ".1"), now = read_file(cfg.file);
    CHECK(old.find("before") != std::string::npos);
    CHECK(old.find("a child's line") != std::string::npos);
    CHECK(now.find("after") != std::string::npos);
    CHECK(now.find("before") == std::string::npos);
    CHECK(lines_of(old).size() + lines_of(now).size() == 4);
    // A symbolic link at the path is refused, and the lines stay where they were.
    std::filesystem::rename(cfg.file, cfg.file + ".2");
    std::filesystem::create_symlink(cfg.file + ".2", cfg.file);
    CHECK_FALSE(smx::reopen_log_file(cfg.file, err));
    CHECK(err == "log file " + cfg.file + " is a symbolic link; refusing to use it");
    spdlog::info("still there");
    smx::drain_log();
    CHECK(read_file(cfg.file + ".2").find("still there") != std::string::npos);
    smx::init_logging("test", smx::LogConfig{});
    std::filesystem::remove_all(dir);
}

TEST_CASE("log: a device that takes nothing blocks the loggers at the bound, and no line is lost") {
    const std::string dir = temp_dir();
    const std::string fifo = dir + "/fifo";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    const int rd = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
    REQUIRE(rd >= 0);
    // As `smx run` hands a child its pipe (a FIFO at log.file is refused).
    const int wr = ::open(fifo.c_str(), O_WRONLY | O_CLOEXEC);
    REQUIRE(wr >= 0);
    smx::LogConfig cfg;
    cfg.file = dir + "/unused.log";
    smx::init_logging("test", cfg, wr);

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
    smx::init_logging("test", smx::LogConfig{});
    ::close(rd);
    std::filesystem::remove_all(dir);
}
