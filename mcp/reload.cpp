#include "mcp/reload.hpp"

#include "mcp/cli_config.hpp"

#include "libsm/config_reload.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace smx::mcp {
namespace {
using namespace std::chrono_literals;

constexpr auto answer_timeout = 10s;

std::string status_path(const std::string& run_dir) { return run_dir + "/reload.status"; }

using Clock = std::chrono::steady_clock;

struct Status {
    long pid = 0;
    Clock::rep taken = 0;
    bool ok = false;
    std::string text;
};

std::optional<Status> read_status(const std::string& path) {
    std::ifstream f(path);
    Status s;
    std::string word;
    if (!(f >> s.pid >> s.taken >> word) || (word != "ok" && word != "error")) return std::nullopt;
    s.ok = word == "ok";
    f.get();  // the newline
    std::ostringstream rest;
    rest << f.rdbuf();
    s.text = rest.str();
    while (!s.text.empty() && s.text.back() == '\n') s.text.pop_back();
    return s;
}

long read_pid(const std::string& path) {
    std::ifstream f(path);
    long pid = 0;
    return f >> pid && pid > 0 ? pid : 0;
}

} // namespace

ReloadOutcome check_reload(const std::string& path, const smx::Config& running) {
    const std::string keeping = "; keeping the running configuration";
    std::ostringstream why;
    auto next = load_checked(path, why);
    if (!next) {
        std::string text = why.str();
        if (text.rfind("smx: ", 0) == 0) text.erase(0, 5);
        while (!text.empty() && text.back() == '\n') text.pop_back();
        return {false, text + keeping, {}};
    }
    std::string err;
    auto secrets = read_secrets(*next, err);
    if (!secrets) return {false, "config error: " + err + keeping, {}};
    if (!check_tables(*next, err)) return {false, "config error: " + err + keeping, {}};
    const auto kept = smx::keep_restart_only(running, *next);
    smx::set_log_level(next->log);
    std::string text = "config reloaded from " + (path.empty() ? "the built-in defaults" : path);
    if (!kept.empty()) {
        // One line: it is logged as well.
        text += "; needs a restart (running values kept):";
        for (const auto& k : kept) text += " " + k;
    }
    return {true, text, std::move(secrets)};
}

bool write_reload_status(const std::string& run_dir, Clock::time_point taken,
                         const ReloadOutcome& o, std::string& err) {
    const std::string path = status_path(run_dir), tmp = path + ".tmp";
    const std::string body = std::to_string(::getpid()) + " " +
                             std::to_string(taken.time_since_epoch().count()) +
                             (o.ok ? " ok\n" : " error\n") + o.text + "\n";
    ::unlink(tmp.c_str());
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = "cannot create " + tmp + ": " + std::strerror(errno);
        return false;
    }
    const bool written = ::write(fd, body.data(), body.size()) == static_cast<ssize_t>(body.size());
    const int saved = errno;
    ::close(fd);
    if (!written || ::rename(tmp.c_str(), path.c_str()) != 0) {
        err = "cannot write " + path + ": " + std::strerror(written ? errno : saved);
        ::unlink(tmp.c_str());
        return false;
    }
    return true;
}

int reload_command(const Args& args, std::ostream& out, std::ostream& err) {
    auto cfg = load_checked(args.config_path, err);
    if (!cfg) return exit_config;
    const std::string run_dir = cfg->run_dir_abs(), pid_file = run_dir + "/smx.pid";
    const long pid = read_pid(pid_file);
    if (pid == 0) {
        err << "smx: reload: smx is not running (no pid in " << pid_file << ")\n";
        return exit_failed;
    }
    const Clock::rep sent = Clock::now().time_since_epoch().count();
    if (::kill(static_cast<pid_t>(pid), SIGHUP) != 0) {
        err << "smx: reload: cannot signal smx (pid " << pid << "): " << std::strerror(errno)
            << '\n';
        return exit_failed;
    }
    const auto deadline = Clock::now() + answer_timeout;
    while (Clock::now() < deadline) {
        const auto s = read_status(status_path(run_dir));
        if (s && s->pid == pid && s->taken > sent) {
            if (s->ok) {
                out << s->text << '\n';
                return exit_ok;
            }
            err << "smx: reload: " << s->text << '\n';
            return exit_config;
        }
        std::this_thread::sleep_for(50ms);
    }
    err << "smx: reload: no answer from smx (pid " << pid << ") within "
        << answer_timeout.count() << " s\n";
    return exit_failed;
}

} // namespace smx::mcp
