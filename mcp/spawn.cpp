#include "mcp/spawn.hpp"

#include "libsm/config_reload.hpp"
#include "libsm/log.hpp"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

extern char** environ;

namespace smx::mcp {
namespace {

enum Step { step_fds, step_setgroups, step_setgid, step_setuid, step_exec };
const char* const step_names[] = {"moving listener fds for", "setgroups for", "setgid for",
                                  "setuid for", "exec"};

// What the child writes to the report pipe when a step before exec fails.
struct Failure {
    int step;
    int error;
};

[[noreturn]] void fail(int report, Step step) {
    const Failure f{step, errno};
    [[maybe_unused]] auto n = ::write(report, &f, sizeof f);
    ::_exit(127);
}

// In the forked child: async-signal-safe calls only, no allocation.
[[noreturn]] void become_child(const Launch& l, int exe, char* const* argv, char* const* envp,
                               std::vector<int>& fds, int report, pid_t supervisor) {
    // The supervisor blocks its signals for sigtimedwait and ignores SIGPIPE;
    // both would survive exec.
    // A reload's SIGHUP that comes before the child has set up its handler
    // must neither end it nor be lost (it may have read the file before the
    // change): blocked, it waits until smx::ConfigReloader unblocks it.
    const sigset_t hup = smx::reload_signals();
    ::sigprocmask(SIG_SETMASK, &hup, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    // Own process group: Ctrl-C reaches only `smx run`, which stops the
    // children in order (SMTPS first).
    ::setpgid(0, 0);

    // Lift the report pipe, the executable and the inherited fds (listeners,
    // session counts, the MCP link, the log pipe) above 3..3+n before dup2
    // puts them there, so no move clobbers another.
    const int first_free = 3 + static_cast<int>(fds.size());
    report = ::fcntl(report, F_DUPFD_CLOEXEC, first_free);
    if (report < 0) ::_exit(127);
    exe = ::fcntl(exe, F_DUPFD_CLOEXEC, first_free);
    if (exe < 0) fail(report, step_fds);
    for (int& fd : fds) {
        fd = ::fcntl(fd, F_DUPFD_CLOEXEC, first_free);
        if (fd < 0) fail(report, step_fds);
    }
    for (std::size_t i = 0; i < fds.size(); ++i) {
        // dup2 clears FD_CLOEXEC on the target: these are the ones inherited.
        if (::dup2(fds[i], 3 + static_cast<int>(i)) < 0) fail(report, step_fds);
    }
    // Nothing else of the supervisor's leaks into the child (best effort on
    // kernels without CLOSE_RANGE_CLOEXEC).
    ::close_range(static_cast<unsigned>(first_free), ~0U, CLOSE_RANGE_CLOEXEC);

    if (l.run_as) {
        if (::setgroups(l.run_as->groups.size(), l.run_as->groups.data()) != 0)
            fail(report, step_setgroups);
        if (::setgid(l.run_as->gid) != 0) fail(report, step_setgid);
        if (::setuid(l.run_as->uid) != 0) fail(report, step_setuid);
    }
    // A child must not outlive a killed supervisor. Set after setuid, which
    // clears it; the getppid() check closes the race with an early death.
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != supervisor) ::_exit(0);

    // Through the fd opened as root: the account needs execute permission
    // on the file, not a way to it (a build tree under /root).
    ::execveat(exe, "", argv, envp, AT_EMPTY_PATH);
    fail(report, step_exec);
}

} // namespace

pid_t spawn(const Launch& l, std::string& err) {
    std::vector<char*> argv;
    for (const auto& a : l.argv) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);

    std::vector<std::string> env;
    for (char** e = environ; *e; ++e)
        if (std::strncmp(*e, "SMX_LISTEN_", 11) != 0 && std::strncmp(*e, "SMX_SMTPS_", 10) != 0 &&
            std::strncmp(*e, "SMX_MCP_", 8) != 0 && std::strncmp(*e, "SMX_LOG_", 8) != 0)
            env.emplace_back(*e);
    if (!l.listen_fds.empty()) {
        std::string v = "SMX_LISTEN_FDS=";
        for (std::size_t i = 0; i < l.listen_fds.size(); ++i)
            v += (i ? "," : "") + std::to_string(3 + i);
        env.push_back(v);
        env.push_back("SMX_LISTEN_LOOPS=" + std::to_string(l.listen_loops));
    }
    if (!l.smtps_process.empty()) env.push_back("SMX_SMTPS_PROCESS=" + l.smtps_process);
    std::vector<int> fds = l.listen_fds;  // the child rewrites its copy
    if (l.session_counts >= 0) {
        env.push_back("SMX_SMTPS_COUNTS=" + std::to_string(3 + fds.size()));
        fds.push_back(l.session_counts);
    }
    if (l.mcp_link >= 0) {
        env.push_back("SMX_MCP_FD=" + std::to_string(3 + fds.size()));
        fds.push_back(l.mcp_link);
    }
    if (l.log_fd >= 0) {
        env.push_back(std::string(smx::log_fd_env) + "=" + std::to_string(3 + fds.size()));
        fds.push_back(l.log_fd);
    }
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    const int exe = ::open(l.path.c_str(), O_PATH | O_CLOEXEC);
    if (exe < 0) {
        err = "exec " + l.path + ": " + std::strerror(errno);
        return -1;
    }
    int pipefd[2];
    if (::pipe2(pipefd, O_CLOEXEC) != 0) {
        err = std::string("pipe: ") + std::strerror(errno);
        ::close(exe);
        return -1;
    }
    const pid_t supervisor = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
        ::close(pipefd[0]);
        become_child(l, exe, argv.data(), envp.data(), fds, pipefd[1], supervisor);
    }
    ::close(exe);
    ::close(pipefd[1]);
    if (pid < 0) {
        err = std::string("fork: ") + std::strerror(errno);
        ::close(pipefd[0]);
        return -1;
    }
    // EOF: exec succeeded and closed the pipe. A Failure: it did not.
    Failure f{};
    ssize_t n;
    do {
        n = ::read(pipefd[0], &f, sizeof f);
    } while (n < 0 && errno == EINTR);
    ::close(pipefd[0]);
    if (n != static_cast<ssize_t>(sizeof f)) return pid;
    ::waitpid(pid, nullptr, 0);
    err = std::string(step_names[f.step]) + " " + l.path + ": " + std::strerror(f.error);
    return -1;
}

} // namespace smx::mcp
