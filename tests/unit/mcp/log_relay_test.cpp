#include "mcp/log_relay.hpp"

#include "libsm/log.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string read_file(const std::string& path) {
    std::ifstream f(path);
    std::stringstream all;
    all << f.rdbuf();
    return all.str();
}

} // namespace

TEST_CASE("log relay: the children's lines reach the file whole, each child's in order, "
          "and follow a reopen") {
    char tmpl[] = "/tmp/smx-relay-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    const std::string dir = tmpl, path = dir + "/smx.log";
    smx::LogConfig cfg;
    cfg.file = path;
    std::string err;
    const int fd = smx::open_log_file(path, err);
    REQUIRE(fd >= 0);
    smx::init_logging("mcp", cfg, fd);
    smx::mcp::LogRelay relay;
    REQUIRE(relay.start(err));

    // Two writers as two children: whole lines, several per write, as
    // their LineSink writes them.
    constexpr int n = 3000;
    std::atomic<bool> short_write{false};  // Catch2's macros are for one thread
    auto child = [&](char who) {
        std::string batch;
        for (int i = 0; i < n; ++i) {
            batch += std::string("child ") + who + " line " + std::to_string(i) + " " +
                     std::string(static_cast<std::size_t>(i % 200), who) + "\n";
            if (batch.size() > 3000 || i == n - 1) {
                if (::write(relay.child_end(), batch.data(), batch.size()) !=
                    static_cast<ssize_t>(batch.size()))
                    short_write = true;
                batch.clear();
            }
        }
    };
    std::thread a(child, 'a'), b(child, 'b');
    a.join();
    b.join();
    REQUIRE_FALSE(short_write);
    // An unfinished line at the end is ended by stop().
    REQUIRE(::write(relay.child_end(), "child c no newline", 18) == 18);
    relay.stop();
    smx::drain_log();

    std::map<char, int> next;
    std::istringstream in(read_file(path));
    int lines = 0;
    for (std::string l; std::getline(in, l); ++lines) {
        if (l == "child c no newline") continue;
        REQUIRE(l.rfind("child ", 0) == 0);
        const char who = l[6];
        const std::string want = std::string("child ") + who + " line " + std::to_string(next[who]) +
                                 " " + std::string(static_cast<std::size_t>(next[who] % 200), who);
        REQUIRE(l == want);
        ++next[who];
    }
    CHECK(next['a'] == n);
    CHECK(next['b'] == n);
    CHECK(lines == 2 * n + 1);

    // After a rename and reopen, a new relay's lines (a restarted smx run's
    // children) go to the new file.
    std::filesystem::rename(path, path + ".1");
    REQUIRE(smx::reopen_log_file(path, err));
    smx::mcp::LogRelay again;
    REQUIRE(again.start(err));
    REQUIRE(::write(again.child_end(), "after the rename\n", 17) == 17);
    again.stop();
    smx::drain_log();
    CHECK(read_file(path) == "after the rename\n");
    smx::init_logging("mcp", smx::LogConfig{});
    std::filesystem::remove_all(dir);
}
