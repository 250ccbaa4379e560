// `smx run` against stand-in children (fake_child.cpp): start order, fd
// passing, restart after kill -9, QMGR restart cascade, clean stop, and the
// start-up failures. The real processes are tested in tests/integration.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

namespace {

int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

std::string slurp(const std::string& path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

bool wait_for(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
        if (pred()) return true;
        std::this_thread::sleep_for(20ms);
    }
    return pred();
}

std::size_t count(const std::string& text, const std::string& what) {
    std::size_t n = 0;
    for (auto p = text.find(what); p != std::string::npos; p = text.find(what, p + 1)) ++n;
    return n;
}

// A process is gone when it no longer exists or is a zombie of init.
bool gone(pid_t pid) {
    const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
    return stat.empty() || stat.substr(stat.rfind(')') + 2, 1) == "Z";
}

// A private bin dir (a copy of smx plus the fake children), config, spool.
struct Sandbox {
    explicit Sandbox(const std::string& extra_config = "", bool with_smtps = true) {
        char tmpl[] = "/tmp/smx-mcp-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl));
        dir = tmpl;
        ::chmod(dir.c_str(), 0755);  // the children may run as another user
        fs::create_directory(dir + "/bin");
        // smx finds its children next to /proc/self/exe, so copy, not link.
        fs::copy_file(SMX_BIN, dir + "/bin/smx");
        for (std::string name : {"smx-qmgr", "smx-smtpc", "smx-smtps", "smx-pickup"}) {
            if (name == "smx-smtps" && !with_smtps) continue;
            fs::create_symlink(FAKE_CHILD_BIN, dir + "/bin/" + name);
        }
        port = free_port();
        config = dir + "/smx.toml";
        // As root, the fake children stay root unless a test names accounts.
        const bool pin = ::geteuid() == 0 && extra_config.find("user") == std::string::npos;
        std::ofstream(config) << "[server]\nlisten = [\"127.0.0.1:" << port << "\"]\n"
                              << (pin ? "user = \"root\"\n" : "")
                              << extra_config << "\n[queue]\nspool_dir = \"spool\"\n"
                              << "run_dir = \"run\"\n";
        log = dir + "/smx.log";
    }
    ~Sandbox() {
        // A test that stopped early (a failed REQUIRE) leaves no relay
        // running: SIGTERM stops its children too.
        if (run_pid > 0 && ::waitpid(run_pid, nullptr, WNOHANG) == 0 &&
            ::kill(run_pid, SIGTERM) == 0 && wait_exit(run_pid, 10s) == -1) {
            ::kill(run_pid, SIGKILL);
            ::waitpid(run_pid, nullptr, 0);
        }
        std::error_code ec;
        fs::remove_all(dir, ec);
    }

    // Starts `smx ARGS...` in dir with stdout and stderr to out_path.
    pid_t spawn(std::vector<std::string> args, const std::string& out_path,
                const std::vector<std::string>& env = {}) const {
        args.insert(args.begin(), dir + "/bin/smx");
        const pid_t pid = ::fork();
        if (pid == 0) {
            if (::chdir(dir.c_str()) != 0) ::_exit(126);
            const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
            ::dup2(fd, 1);
            ::dup2(fd, 2);
            for (const auto& e : env) ::putenv(const_cast<char*>(e.c_str()));
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execv(argv[0], argv.data());
            ::_exit(127);
        }
        return pid;
    }

    pid_t start_run(const std::vector<std::string>& env = {}) const {
        run_pid = spawn({"run", "-c", config}, log, env);
        return run_pid;
    }

    // Runs `smx ARGS...` to the end: exit status and output.
    std::pair<int, std::string> call(const std::vector<std::string>& args,
                                     const std::vector<std::string>& env = {}) const {
        const std::string out = dir + "/call.out";
        fs::remove(out);
        const pid_t pid = spawn(args, out, env);
        const int status = wait_exit(pid, 20s);
        return {status, slurp(out)};
    }

    // The exit status, or -1 after timeout.
    static int wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
        int status = 0;
        const bool done =
            wait_for([&] { return ::waitpid(pid, &status, WNOHANG) == pid; }, timeout);
        if (!done) return -1;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }

    std::string log_text() const { return slurp(log); }

    bool log_has(const std::string& what, std::size_t n = 1,
                 std::chrono::milliseconds timeout = 15s) const {
        return wait_for([&] { return count(log_text(), what) >= n; }, timeout);
    }

    // The pid from the n-th "starting NAME (pid N)" line (1-based).
    pid_t child_pid(const std::string& name, std::size_t n = 1) const {
        const std::string text = log_text(), key = "starting " + name + " (pid ";
        std::size_t p = std::string::npos;
        for (std::size_t i = 0; i < n; ++i) {
            p = text.find(key, p == std::string::npos ? 0 : p + 1);
            if (p == std::string::npos) return -1;
        }
        return std::stoi(text.substr(p + key.size()));
    }

    std::string dir, config, log;
    int port = 0;
    mutable pid_t run_pid = -1;  // smx run, once start_run made it
};

std::string greeting(int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    std::string got;
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
        char buf[64];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n > 0) got.assign(buf, static_cast<std::size_t>(n));
    }
    ::close(fd);
    return got;
}

} // namespace

TEST_CASE("smx run: starts, passes the listener, restarts, stops on SIGTERM") {
    Sandbox sb;
    const pid_t mcp = sb.start_run();
    REQUIRE(sb.log_has("starting smx-smtps (pid "));
    INFO(sb.log_text());

    // QMGR first and answering, then SMTPC, then SMTPS.
    const std::string text = sb.log_text();
    const auto q = text.find("starting smx-qmgr"), ready = text.find("smx-qmgr answers on");
    const auto c = text.find("starting smx-smtpc"), s = text.find("starting smx-smtps");
    CHECK(q < ready);
    CHECK(ready < c);
    CHECK(c < s);
    CHECK(text.find("smx/mcp[" + std::to_string(mcp) + "]") != std::string::npos);

    CHECK(fs::is_directory(sb.dir + "/spool/cdb/00"));
    CHECK(fs::is_directory(sb.dir + "/spool/cdb/FF"));
    for (auto d : {"ibdb", "defedb", "quarantine"}) CHECK(fs::is_directory(sb.dir + "/spool/" + d));
    CHECK(slurp(sb.dir + "/run/smx.pid") == std::to_string(mcp) + "\n");

    // The listener reached smx-smtps as an inherited fd.
    CHECK(greeting(sb.port) == "220 fake\r\n");

    // The CLI talks to QMGR.
    auto [st, out] = sb.call({"stats", "--json", "-c", sb.config});
    CHECK(st == 0);
    CHECK(out.find("\"received\": 12,") != std::string::npos);
    CHECK(out.find("\"state\": \"running\"") != std::string::npos);
    std::tie(st, out) = sb.call({"hold", "6740A1B2C3D4E0001", "-c", sb.config});
    CHECK(st == 1);
    CHECK(out == "smx: hold: no such queue id\n");
    std::tie(st, out) = sb.call({"queue", "-c", sb.config});
    CHECK(st == 0);
    CHECK(out == "queue\n");

    // One smx run per run directory.
    std::tie(st, out) = sb.call({"run", "-c", sb.config});
    CHECK(st == 1);
    CHECK(out.find("another smx run is using " + sb.dir + "/run (pid " + std::to_string(mcp) +
                   ")") != std::string::npos);

    // kill -9 of a worker: logged, restarted after 1 s.
    const pid_t smtpc1 = sb.child_pid("smx-smtpc");
    REQUIRE(::kill(smtpc1, SIGKILL) == 0);
    CHECK(sb.log_has("smx-smtpc killed by signal 9; restarting in 1 s"));
    REQUIRE(sb.log_has("starting smx-smtpc (pid ", 2));
    CHECK(sb.child_pid("smx-smtpc", 2) != smtpc1);

    // kill -9 of QMGR: the others are stopped and come back after it.
    const pid_t qmgr1 = sb.child_pid("smx-qmgr"), smtps1 = sb.child_pid("smx-smtps");
    REQUIRE(::kill(qmgr1, SIGKILL) == 0);
    CHECK(sb.log_has("smx-qmgr killed by signal 9; restarting in 1 s"));
    CHECK(sb.log_has("stopping smx-smtps, smx-pickup and smx-smtpc until smx-qmgr is back"));
    REQUIRE(sb.log_has("starting smx-smtps (pid ", 2));
    CHECK(sb.log_has("smx-qmgr answers on", 2));
    CHECK(sb.log_has("starting smx-smtpc (pid ", 3));
    CHECK(gone(smtps1));
    CHECK(wait_for([&] { return greeting(sb.port) == "220 fake\r\n"; }, 5s));

    // SIGTERM: everything stops within 5 s, the pid file goes.
    const pid_t children[] = {sb.child_pid("smx-qmgr", 2), sb.child_pid("smx-smtpc", 3),
                              sb.child_pid("smx-smtps", 2)};
    const auto t0 = Clock::now();
    REQUIRE(::kill(mcp, SIGTERM) == 0);
    CHECK(Sandbox::wait_exit(mcp, 10s) == 0);
    CHECK(Clock::now() - t0 < 5s);
    for (pid_t p : children) CHECK(gone(p));
    CHECK_FALSE(fs::exists(sb.dir + "/run/smx.pid"));
    // Intake stopped first.
    CHECK(sb.log_text().rfind("smx-smtps stopped (exited with status 0)") <
          sb.log_text().rfind("smx-qmgr stopped (exited with status 0)"));
}

TEST_CASE("smx run: a missing child binary is a clear error, exit 1") {
    Sandbox sb("", false);
    auto [st, out] = sb.call({"run", "-c", sb.config});
    CHECK(st == 1);
    CHECK(out.find("cannot find smx-smtps (looked for " + sb.dir + "/bin/smx-smtps") !=
          std::string::npos);
    CHECK(out.find("starting") == std::string::npos);
}

TEST_CASE("smx run: a QMGR that exits at once is reported, exit 1, or 2 for its config error") {
    Sandbox sb;
    auto [st, out] = sb.call({"run", "-c", sb.config}, {"FAKE_EXIT=3"});
    CHECK(st == 1);
    CHECK(out.find("smx-qmgr exited with status 3 before answering on " + sb.dir +
                   "/run/qmgr.sock; stopping") != std::string::npos);
    CHECK(out.find("starting smx-smtpc") == std::string::npos);
    CHECK_FALSE(fs::exists(sb.dir + "/run/smx.pid"));
    std::tie(st, out) = sb.call({"run", "-c", sb.config}, {"FAKE_EXIT=2"});
    CHECK(st == 2);
    CHECK(out.find("smx-qmgr exited with status 2 before answering on ") != std::string::npos);
}

TEST_CASE("smx run: a busy listen address is a clear error, exit 1") {
    Sandbox sb;
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<std::uint16_t>(sb.port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 1) == 0);
    auto [st, out] = sb.call({"run", "-c", sb.config});
    ::close(fd);
    CHECK(st == 1);
    CHECK(out.find("cannot listen on 127.0.0.1:" + std::to_string(sb.port) +
                   ": Address already in use") != std::string::npos);
}

TEST_CASE("smx run: a bad config starts nothing, exit 2") {
    Sandbox sb("max_recipients = -1");
    auto [st, out] = sb.call({"run", "-c", sb.config});
    CHECK(st == 2);
    CHECK(out == "smx: config error: server.max_recipients: must be > 0\n");
    CHECK_FALSE(fs::exists(sb.dir + "/spool"));
}

TEST_CASE("smx run: a child that ignores SIGTERM is killed after 5 s") {
    Sandbox sb;
    const pid_t mcp = sb.start_run({"FAKE_IGNORE_TERM=1"});
    REQUIRE(sb.log_has("starting smx-smtps (pid "));
    const auto t0 = Clock::now();
    REQUIRE(::kill(mcp, SIGTERM) == 0);
    CHECK(Sandbox::wait_exit(mcp, 10s) == 0);
    CHECK(Clock::now() - t0 < 6s);
    CHECK(sb.log_has("smx-qmgr did not stop within 5 s; sending SIGKILL"));
}

TEST_CASE("smx run as root: a missing account is a config error naming it") {
    if (::geteuid() != 0) {
        WARN("not root: accounts not looked up");
        return;
    }
    Sandbox sb("smtps_user = \"no-such-user-smx\"");
    const auto [status, out] = sb.call({"run", "-c", sb.config});
    CHECK(status == 2);
    CHECK(out.find("smx: config error: server.smtps_user: no such user 'no-such-user-smx' "
                   "(create it as root with scripts/lib/setup.sh") != std::string::npos);
    CHECK_FALSE(fs::exists(sb.dir + "/spool"));
}

TEST_CASE("smx run as root with [server] user: children run as that user") {
    const passwd* pw = ::getpwnam("nobody");
    if (::geteuid() != 0 || !pw) {
        WARN("not root or no user nobody: privilege drop not tested");
        return;
    }
    const uid_t uid = pw->pw_uid;
    Sandbox sb("user = \"nobody\"");
    const pid_t mcp = sb.start_run();
    REQUIRE(sb.log_has("starting smx-smtps (pid "));
    INFO(sb.log_text());
    CHECK(greeting(sb.port) == "220 fake\r\n");  // root bound it, nobody serves it
    for (auto name : {"smx-qmgr", "smx-smtpc", "smx-smtps"}) {
        const std::string status = slurp("/proc/" + std::to_string(sb.child_pid(name)) + "/status");
        CHECK(status.find("Uid:\t" + std::to_string(uid) + "\t") != std::string::npos);
    }
    struct stat st;
    REQUIRE(::stat((sb.dir + "/spool/cdb/7F").c_str(), &st) == 0);
    CHECK(st.st_uid == uid);
    ::kill(mcp, SIGTERM);
    CHECK(Sandbox::wait_exit(mcp, 10s) == 0);
}

TEST_CASE("smx run: a worker that cannot start stops it, exit 2 with the worker's reason") {
    Sandbox sb;
    const auto t0 = Clock::now();
    auto [st, out] = sb.call({"run", "-c", sb.config}, {"FAKE_CANNOT_START=smx-smtps"});
    INFO(out);
    CHECK(st == 2);
    // At once, not after a backoff.
    CHECK(Clock::now() - t0 < 10s);
    // The child's own line, then the MCP's with the reason it was sent, made
    // one line.
    CHECK(out.find("smx-smtps: fake reason\n") != std::string::npos);
    CHECK(out.find("smx-smtps exited with status 2 before it was ready: fake reason?with a "
                   "second line; stopping") != std::string::npos);
    CHECK(out.find("restarting") == std::string::npos);
    CHECK(out.find("smx-qmgr stopped (exited with status 0)") != std::string::npos);
    CHECK(out.find("smx-smtpc stopped (exited with status 0)") != std::string::npos);
    CHECK_FALSE(fs::exists(sb.dir + "/run/smx.pid"));
}

TEST_CASE("smx run: a worker that fails after it was ready is restarted, whatever its status") {
    Sandbox sb;
    const pid_t mcp = sb.start_run();
    REQUIRE(sb.log_has("starting smx-smtps (pid "));
    INFO(sb.log_text());
    REQUIRE(sb.log_has("smx-smtpc: ready"));
    REQUIRE(sb.log_has("smx-smtps: ready"));
    // The fake child exits 3 on SIGUSR1: a status a child that never was
    // ready would stop smx run with.
    const pid_t smtpc = sb.child_pid("smx-smtpc"), smtps = sb.child_pid("smx-smtps");
    REQUIRE(smtpc > 0);
    REQUIRE(smtps > 0);
    REQUIRE(::kill(smtpc, SIGUSR1) == 0);
    CHECK(sb.log_has("smx-smtpc exited with status 3; restarting in 1 s"));
    CHECK(sb.log_has("starting smx-smtpc (pid ", 2));
    REQUIRE(::kill(smtps, SIGUSR1) == 0);
    CHECK(sb.log_has("smx-smtps exited with status 3; restarting in 1 s"));
    CHECK(sb.log_has("starting smx-smtps (pid ", 2));
    CHECK(wait_for([&] { return greeting(sb.port) == "220 fake\r\n"; }, 5s));
    ::kill(mcp, SIGTERM);
    CHECK(Sandbox::wait_exit(mcp, 10s) == 0);
}
