// The MCP's supervision loop: starts smx-qmgr, then smx-smtpc, smx-pickup
// (local submission, as the SMTPS account) and smx-smtps (server.processes
// of them, each with its share of the listening sockets, and each worker
// with its secrets over a ChildLink);
// restarts a child that dies (backoff 1 s doubling to 30 s, reset after 60 s
// of running; a QMGR restart restarts the others), but stops when a child
// cannot start at all (below); on SIGTERM/SIGINT stops SMTPS and pickup
// first, then SMTPC and QMGR; on SIGHUP reloads the config and the secrets
// (reload.hpp); on SIGHUP and SIGUSR1 opens the log file again (log_relay.hpp).
// Tells a service manager when SMTPS first answers (READY=1) and when it
// stops (STOPPING=1).
//
// A child cannot start when it never was ready (QMGR: answered a HELLO;
// SMTPS, SMTPC: said "ready" over their link) and exits with a non-zero
// status, or cannot be executed: smx run then stops, exit 2 when the child
// exited 2 (a config error), else 1, with the child's reason, rather than
// restart it for ever while the listeners accept connections nobody greets.
//
// Single-threaded and synchronous: SIGCHLD, SIGTERM, SIGINT, SIGHUP and SIGUSR1 stay blocked
// and are taken with sigtimedwait, so every event is handled in one place,
// in order, with no handler races. Every wait takes them, and the readiness
// probes end when one is pending: a reload is applied within a second
// whatever the supervisor is doing (starting QMGR, stopping the workers).
#pragma once

#include "mcp/child_link.hpp"
#include "mcp/secret_files.hpp"
#include "mcp/spawn.hpp"

#include "libsm/config.hpp"
#include "libsm/session_counts.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <signal.h>
#include <string>
#include <vector>

namespace smx::mcp {

// Blocks the signals the supervisor waits for. Call before any thread
// exists (the log thread), so that none of them takes the signals.
void block_supervisor_signals();

struct Plan {
    std::string qmgr_path, smtpc_path, smtps_path, pickup_path;
    std::string config_path;     // passed as -c when not empty
    std::string qmgr_socket;
    std::vector<int> listen_fds;  // for smx-smtps, loop by loop (smx::listen_all)
    unsigned listen_loops = 0;    // all their event loops: listen_fds.size() / listen addresses
    unsigned smtps_processes = 1; // the loops' sockets split evenly among them, in order
    int session_counts = -1;      // several: their smx::SessionCounts memfd
    int log_fd = -1;              // log.file set: the children's end of the LogRelay
    std::optional<Accounts> accounts;  // set when started as root
    ChildSecrets secrets;        // as read at start, then at each reload that passed
    smx::Config config;           // as loaded at start: a reload compares with it
};

class Supervisor {
public:
    explicit Supervisor(Plan plan);
    // Runs until SIGTERM/SIGINT (0), or until a child cannot start (2 or 1).
    int run();

private:
    using Clock = std::chrono::steady_clock;

    struct Child {
        std::string name;     // "smx-qmgr"; "smx-smtps#2" for one of several
        std::string program;  // its argv[0]: "smx-smtps"
        std::string path;
        std::optional<unsigned> smtps_index;  // an smx-smtps: its share of the listeners
        const RunAs* run_as = nullptr;  // its account when started as root
        const smx::Secrets* secrets = nullptr;  // in plan_: an smx-smtps's or smx-smtpc's
        ChildLink link;                        // of its latest start, when it takes secrets
        bool ready_once = false;               // it was ready once: no longer "cannot start"
        pid_t pid = 0;
        Clock::time_point started{};
        std::chrono::seconds backoff{1};
        std::optional<Clock::time_point> start_at;  // when a dead child is due again
        bool stopping = false;                      // we sent SIGTERM: not a crash
        std::optional<int> exit_status;             // reaped, not yet handled
    };

    bool start(Child& c, std::string& why);
    bool start_qmgr(std::string& why);
    void start_workers();
    void start_due();
    std::optional<Clock::time_point> next_due() const;
    void restart_later(Child& c, const std::string& why);
    // A child that did not start or exited on its own (why): restarted
    // later, or smx run stops when it cannot start (above). Anything a
    // worker does while QMGR is down is QMGR's doing.
    void lost(Child& c, const std::string& why);
    void cannot_start(Child& c, const std::string& why);
    void handle_crashes();
    // Once, when SMTPS first greets: READY=1 to the service manager.
    void check_ready();

    // SIGHUP: checks the file, signals the children, writes the outcome.
    void reload();
    // SIGHUP, SIGUSR1: log.file opened again at its path (after a rename).
    void reopen_log();

    // Waits for a signal until deadline (none: an hour); a SIGHUP is
    // handled here (reload), SIGTERM/SIGINT set stop_requested_.
    int wait_signal(std::optional<Clock::time_point> deadline);
    void reap();
    void terminate(Child& c);
    void wait_exit(const std::vector<Child*>& cs, Clock::time_point deadline);
    void kill_stragglers(const std::vector<Child*>& cs);
    void kill_now(Child& c);
    // Reaped: no pid, and an smx-smtps's sessions no longer counted.
    void gone(Child& c);
    void stop_workers();
    // smx-smtpc, smx-pickup and the smx-smtps processes.
    std::vector<Child*> workers();
    // Intake: the smx-smtps processes and smx-pickup, stopped first.
    std::vector<Child*> intake();
    void shutdown();

    Plan plan_;
    Child qmgr_, smtpc_, pickup_;
    std::vector<Child> smtps_;  // sized once: all_ points into it
    std::unique_ptr<smx::SessionCounts> counts_;  // several smtps_: a dead one's slot is cleared
    std::vector<Child*> all_;
    bool stop_requested_ = false;
    bool ready_ = false;
    std::optional<int> failed_;  // a child cannot start: smx run's exit status
};

// Why smx run stops without being asked: logged as an error and, when the
// log goes to a file or syslog, on stderr too, for whoever started it.
void report_stop(const smx::LogConfig& log, const std::string& why);

} // namespace smx::mcp
