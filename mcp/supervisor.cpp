#include "libsm/panic.hpp"
#include "mcp/cli.hpp"
#include "mcp/ready.hpp"
#include "mcp/reload.hpp"
#include "mcp/supervisor.hpp"

#include "libsm/log.hpp"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>

namespace smx::mcp {
namespace {
using namespace std::chrono_literals;

constexpr auto qmgr_ready_timeout = 10s;
constexpr auto stop_timeout = 5s;          // SIGTERM to SIGKILL
constexpr auto smtps_drain_timeout = 3s;   // of stop_timeout, before QMGR is told to stop
constexpr auto backoff_max = 30s;
constexpr auto backoff_reset_after = 60s;  // a child that ran this long starts over at 1 s
constexpr auto ready_poll = 100ms;         // SMTPS greeting probes until it answers

sigset_t supervisor_signals() {
    sigset_t s;
    ::sigemptyset(&s);
    ::sigaddset(&s, SIGCHLD);
    ::sigaddset(&s, SIGTERM);
    ::sigaddset(&s, SIGINT);
    ::sigaddset(&s, SIGHUP);
    ::sigaddset(&s, SIGUSR1);
    return s;
}

std::string describe(int status) {
    if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status))
        return "killed by signal " + std::to_string(WTERMSIG(status)) +
               (WCOREDUMP(status) ? " (core dumped)" : "");
    return "ended with wait status " + std::to_string(status);
}

} // namespace

void report_stop(const smx::LogConfig& log, const std::string& why) {
    spdlog::error("{}", why);
    if (!log.file.empty() || !log.syslog.empty()) std::cerr << "smx: " << why << '\n';
    spdlog::default_logger()->flush();
}

void block_supervisor_signals() {
    const sigset_t s = supervisor_signals();
    ::sigprocmask(SIG_BLOCK, &s, nullptr);
    // A closed stderr must not kill the supervisor.
    ::signal(SIGPIPE, SIG_IGN);
}

Supervisor::Supervisor(Plan plan) : plan_(std::move(plan)) {
    qmgr_.name = qmgr_.program = "smx-qmgr";
    qmgr_.path = plan_.qmgr_path;
    smtpc_.name = smtpc_.program = "smx-smtpc";
    smtpc_.path = plan_.smtpc_path;
    pickup_.name = pickup_.program = "smx-pickup";
    pickup_.path = plan_.pickup_path;
    smtps_.resize(plan_.smtps_processes);
    for (unsigned i = 0; i < smtps_.size(); ++i) {
        Child& c = smtps_[i];
        c.name = smtps_.size() == 1 ? "smx-smtps" : "smx-smtps#" + std::to_string(i + 1);
        c.program = "smx-smtps";
        c.path = plan_.smtps_path;
        c.smtps_index = i;
    }
    smtpc_.secrets = &plan_.secrets.smtpc;
    pickup_.secrets = &plan_.secrets.pickup;
    for (Child& c : smtps_) c.secrets = &plan_.secrets.smtps;
    if (plan_.accounts) {
        qmgr_.run_as = &plan_.accounts->qmgr;
        smtpc_.run_as = &plan_.accounts->smtpc;
        // It writes content as SMTPS does, and owns the maildrop.
        pickup_.run_as = &plan_.accounts->smtps;
        for (Child& c : smtps_) c.run_as = &plan_.accounts->smtps;
    }
    if (plan_.session_counts >= 0)
        counts_ = std::make_unique<smx::SessionCounts>(plan_.session_counts);
    all_ = {&qmgr_};
    for (Child* w : workers()) all_.push_back(w);
}

std::vector<Supervisor::Child*> Supervisor::intake() {
    std::vector<Child*> out{&pickup_};
    for (Child& c : smtps_) out.push_back(&c);
    return out;
}

std::vector<Supervisor::Child*> Supervisor::workers() {
    std::vector<Child*> out{&smtpc_};
    for (Child* c : intake()) out.push_back(c);
    return out;
}

int Supervisor::run() {
    std::string why;
    if (!start_qmgr(why)) {
        if (!stop_requested_) cannot_start(qmgr_, why);
        shutdown();
        return failed_.value_or(exit_ok);
    }
    start_workers();
    while (!stop_requested_ && !failed_) {
        check_ready();
        auto deadline = next_due();
        if (!ready_) deadline = std::min(deadline.value_or(Clock::time_point::max()),
                                         Clock::now() + ready_poll);
        wait_signal(deadline);
        reap();
        handle_crashes();
        // A QMGR restart restarts the others: they hold state of the old one.
        if (qmgr_.pid == 0) stop_workers();
        start_due();
    }
    notify_service("STOPPING=1");
    shutdown();
    return failed_.value_or(exit_ok);
}

void Supervisor::check_ready() {
    const bool all_smtps = std::all_of(smtps_.begin(), smtps_.end(),
                                       [](const Child& c) { return c.pid != 0; });
    if (ready_ || !all_smtps || plan_.listen_fds.empty() ||
        !smtp_greets(plan_.listen_fds.front(), supervisor_signals()))
        return;
    ready_ = true;
    spdlog::info("ready: smx-smtps answers");
    notify_service("READY=1\nSTATUS=accepting mail");
}

bool Supervisor::start(Child& c, std::string& why) {
    Launch l{c.path, {c.program}, {}, c.run_as, 1, {}, -1, -1, plan_.log_fd};
    if (!plan_.config_path.empty()) l.argv.insert(l.argv.end(), {"-c", plan_.config_path});
    std::string err;
    if (c.secrets) {
        if (!c.link.open(err) || !c.link.send(*c.secrets, err)) {
            why = "cannot be started: " + err;
            return false;
        }
        l.mcp_link = c.link.child_end();
    }
    if (c.smtps_index) {
        // Loop by loop, so each process's loops are one run of the fds.
        const std::size_t n = plan_.listen_fds.size() / plan_.smtps_processes;
        const auto first = plan_.listen_fds.begin() + static_cast<std::ptrdiff_t>(*c.smtps_index * n);
        l.listen_fds.assign(first, first + static_cast<std::ptrdiff_t>(n));
        l.listen_loops = plan_.listen_loops / plan_.smtps_processes;
        l.smtps_process = std::to_string(*c.smtps_index) + "/" + std::to_string(plan_.smtps_processes);
        l.session_counts = plan_.session_counts;
    }
    const pid_t pid = spawn(l, err);
    c.link.child_started();
    if (pid < 0) {
        why = "cannot be started: " + err;
        return false;
    }
    c.pid = pid;
    c.started = Clock::now();
    c.start_at.reset();
    spdlog::info("starting {} (pid {})", c.name, pid);
    return true;
}

bool Supervisor::start_qmgr(std::string& why) {
    // A socket left by a dead QMGR refuses connections; remove it so that
    // readiness means the new one is listening.
    ::unlink(plan_.qmgr_socket.c_str());
    if (!start(qmgr_, why)) return false;
    const auto deadline = Clock::now() + qmgr_ready_timeout;
    while (!qmgr_answers(plan_.qmgr_socket, supervisor_signals())) {
        if (stop_requested_) {
            why = "start interrupted";
            return false;
        }
        if (Clock::now() >= deadline) {
            why = "did not answer on " + plan_.qmgr_socket + " within 10 s";
            kill_now(qmgr_);
            return false;
        }
        wait_signal(std::min(deadline, Clock::now() + 100ms));
        reap();
        // Left for the caller, which decides what the exit means.
        if (qmgr_.exit_status) {
            why = describe(*qmgr_.exit_status) + " before answering on " + plan_.qmgr_socket;
            return false;
        }
    }
    spdlog::info("smx-qmgr answers on {}", plan_.qmgr_socket);
    qmgr_.ready_once = true;
    return true;
}

void Supervisor::start_workers() {
    for (Child* w : workers()) {
        std::string why;
        if (w->pid == 0 && !start(*w, why)) lost(*w, why);
    }
}

void Supervisor::start_due() {
    if (stop_requested_ || failed_) return;
    const auto now = Clock::now();
    auto due = [&](const Child& c) { return c.pid == 0 && c.start_at && *c.start_at <= now; };
    std::string why;
    if (qmgr_.pid == 0) {
        if (!due(qmgr_)) return;
        if (start_qmgr(why)) start_workers();
        else if (!stop_requested_) lost(qmgr_, why);
        else qmgr_.exit_status.reset();
        return;
    }
    for (Child* w : workers())
        if (due(*w) && !start(*w, why)) lost(*w, why);
}

std::optional<Supervisor::Clock::time_point> Supervisor::next_due() const {
    // Workers wait for QMGR, so only its restart counts while it is down.
    if (qmgr_.pid == 0) return qmgr_.start_at;
    std::optional<Clock::time_point> t;
    for (const Child* w : all_)
        if (w->pid == 0 && w->start_at && (!t || *w->start_at < *t)) t = w->start_at;
    return t;
}

void Supervisor::restart_later(Child& c, const std::string& why) {
    const auto now = Clock::now();
    if (now - c.started >= backoff_reset_after) c.backoff = 1s;
    const auto delay = c.backoff;
    c.backoff = std::min<std::chrono::seconds>(c.backoff * 2, backoff_max);
    c.start_at = now + delay;
    spdlog::warn("{} {}; restarting in {} s", c.name, why, delay.count());
}

void Supervisor::lost(Child& c, const std::string& why) {
    const bool said_so = !c.exit_status ||
                         (WIFEXITED(*c.exit_status) && WEXITSTATUS(*c.exit_status) != 0);
    if (!c.ready_once && said_so && (&c == &qmgr_ || qmgr_.pid != 0))
        cannot_start(c, why + (c.exit_status ? " before it was ready" : ""));
    else
        restart_later(c, why);
    c.exit_status.reset();
}

void Supervisor::cannot_start(Child& c, const std::string& why) {
    const bool config = c.exit_status && WIFEXITED(*c.exit_status) &&
                        WEXITSTATUS(*c.exit_status) == exit_config;
    failed_ = config ? exit_config : exit_failed;
    const std::string& reason = c.link.cannot_start();
    report_stop(plan_.config.log,
                c.name + " " + why + (reason.empty() ? "" : ": " + reason) + "; stopping");
}

void Supervisor::handle_crashes() {
    for (Child* c : all_)
        if (c->exit_status && !failed_) lost(*c, describe(*c->exit_status));
}

void Supervisor::reopen_log() {
    const std::string& path = plan_.config.log.file;
    if (path.empty()) return;
    std::string err;
    if (smx::reopen_log_file(path, err)) spdlog::info("log file {} opened again", path);
    else spdlog::error("{}; logging on to the file open before", err);
}

void Supervisor::reload() {
    const auto taken = Clock::now();
    ReloadOutcome o = check_reload(plan_.config_path, plan_.config);
    if (o.ok) {
        // A child not running now reads the new file, and gets the new
        // secrets, when it starts.
        plan_.secrets = std::move(*o.secrets);
        for (Child* c : all_) {
            if (c->pid == 0 || c->stopping) continue;
            // The secrets first, so that the child finds them on SIGHUP.
            std::string err;
            if (c->secrets && !c->link.send(*c->secrets, err)) {
                spdlog::error("reload: {}: {}; not told to reload", c->name, err);
                continue;
            }
            ::kill(c->pid, SIGHUP);
        }
        spdlog::info("reload: {}", o.text);
    } else {
        spdlog::error("reload: {}", o.text);
    }
    std::string err;
    if (!write_reload_status(plan_.config.run_dir_abs(), taken, o, err))
        spdlog::error("reload: {}", err);
}

int Supervisor::wait_signal(std::optional<Clock::time_point> deadline) {
    const sigset_t set = supervisor_signals();
    auto wait = std::chrono::nanoseconds(std::chrono::hours(1));
    if (deadline) wait = std::max<std::chrono::nanoseconds>(*deadline - Clock::now(), 0ns);
    timespec ts{static_cast<time_t>(wait.count() / 1000000000),
                static_cast<long>(wait.count() % 1000000000)};
    const int sig = ::sigtimedwait(&set, nullptr, &ts);
    // At once, in whatever wait it comes (a QMGR start, a stop of the
    // workers): a reload is answered within a second at any moment. A reload
    // opens the log file again too: `smx reload` after a rename.
    if (sig == SIGHUP || sig == SIGUSR1) reopen_log();
    if (sig == SIGHUP) reload();
    if ((sig == SIGTERM || sig == SIGINT) && !stop_requested_) {
        spdlog::info("{} received, stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
        stop_requested_ = true;
    }
    return sig;
}

void Supervisor::reap() {
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
        for (Child* c : all_) {
            if (c->pid != pid) continue;
            gone(*c);
            if (c->stopping) {
                c->stopping = false;
                spdlog::info("{} stopped ({})", c->name, describe(status));
            } else {
                c->exit_status = status;
            }
        }
    }
}

void Supervisor::terminate(Child& c) {
    if (c.pid == 0) return;
    c.stopping = true;
    ::kill(c.pid, SIGTERM);
}

void Supervisor::wait_exit(const std::vector<Child*>& cs, Clock::time_point deadline) {
    auto running = [&] {
        return std::any_of(cs.begin(), cs.end(), [](const Child* c) { return c->pid != 0; });
    };
    while (running() && Clock::now() < deadline) {
        wait_signal(deadline);
        reap();
    }
}

void Supervisor::kill_stragglers(const std::vector<Child*>& cs) {
    for (Child* c : cs) {
        if (c->pid == 0) continue;
        spdlog::warn("{} did not stop within {} s; sending SIGKILL", c->name,
                     stop_timeout.count());
        kill_now(*c);
    }
}

void Supervisor::kill_now(Child& c) {
    ::kill(c.pid, SIGKILL);
    ::waitpid(c.pid, nullptr, 0);
    gone(c);
    c.stopping = false;
}

void Supervisor::gone(Child& c) {
    c.pid = 0;
    // What it said before it went: whether it was ready, or why it could not start.
    c.link.read_reports();
    if (c.link.ready()) c.ready_once = true;
    // Its sessions are gone with it: the other smx-smtps may take them.
    if (counts_ && c.smtps_index) counts_->set(*c.smtps_index, 0);
}

void Supervisor::stop_workers() {
    std::vector<Child*> running;
    for (Child* w : workers())
        if (w->pid != 0) running.push_back(w);
    if (running.empty()) return;
    spdlog::info("stopping smx-smtps, smx-pickup and smx-smtpc until smx-qmgr is back");
    for (Child* w : running) terminate(*w);
    wait_exit(running, Clock::now() + stop_timeout);
    kill_stragglers(running);
}

void Supervisor::shutdown() {
    const auto deadline = Clock::now() + stop_timeout;
    // Intake first, while QMGR is still there to ack what SMTPS holds.
    for (Child* c : intake()) terminate(*c);
    wait_exit(intake(), Clock::now() + smtps_drain_timeout);
    terminate(smtpc_);
    terminate(qmgr_);
    wait_exit(all_, deadline);
    kill_stragglers(all_);
    spdlog::info("all children stopped");
}

} // namespace smx::mcp
