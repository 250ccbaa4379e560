#include "mcp/run.hpp"

#include "mcp/cli_config.hpp"

#include "libsm/content_trust.hpp"
#include "libsm/limits.hpp"
#include "libsm/listen.hpp"
#include "libsm/log.hpp"
#include "libsm/panic.hpp"
#include "libsm/session_counts.hpp"
#include "mcp/log_relay.hpp"
#include "mcp/privsep.hpp"
#include "mcp/startup.hpp"
#include "mcp/supervisor.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

namespace smx::mcp {
namespace {
namespace fs = std::filesystem;

// Next to smx (a copied set of programs); in the build tree each in its own
// folder (build/mcp/smx, build/qmgr/smx-qmgr); installed, in libexec/smx.
std::optional<std::string> find_child(const fs::path& dir, const std::string& name,
                                      std::string& err) {
    const std::string role = name.substr(name.find('-') + 1);
    const fs::path candidates[] = {dir / name, (dir / ".." / role / name).lexically_normal(),
                                   fs::path(SMX_LIBEXECDIR) / name};
    err = "cannot find " + name + " (looked for";
    for (const auto& p : candidates) {
        if (::access(p.c_str(), X_OK) == 0) return p.string();
        err += " " + p.string();
    }
    err += ")";
    return std::nullopt;
}

} // namespace

int run(const Args& args) {
    // Before the log thread exists, so that no thread takes these signals
    // away from the supervisor's sigtimedwait.
    block_supervisor_signals();
    // Inherited by the children: nothing they or we create (spool files,
    // quarantine copies, the log) is for other users.
    ::umask(027);
    auto cfg = load_checked(args.config_path, std::cerr);
    if (!cfg) return exit_config;
    std::string err;
    // Read as whoever started smx run (root: a root-only key is fine), before
    // any child gives up that account.
    auto secrets = read_secrets(*cfg, err);
    if (!secrets) {
        std::cerr << "smx: config error: " << err << '\n';
        return exit_config;
    }
    auto accounts = lookup_accounts(*cfg, err);
    if (!err.empty() || !check_paths(*cfg, err) || !check_tables(*cfg, err)) {
        std::cerr << "smx: config error: " << err << '\n';
        return exit_config;
    }
    // Who may have written content, for every reader in the children
    // (libsm/content_trust.hpp); set before any thread runs.
    if (accounts)
        ::setenv(smx::content::writers_env,
                 smx::content::writers_env_value({accounts->smtps.uid, accounts->qmgr.uid}).c_str(), 1);
    else
        ::unsetenv(smx::content::writers_env);

    // log.file is ours alone: the children's lines come through the relay.
    int log_file = -1;
    if (!cfg->log.file.empty() && (log_file = smx::open_log_file(cfg->log.file, err)) < 0) {
        std::cerr << "smx: " << err << '\n';
        return exit_failed;
    }
    smx::init_logging("mcp", cfg->log, log_file);
    smx::install_crash_handlers("mcp");
    spdlog::info("config: {}", args.config_source);
    for (const auto& w : config_warnings(*cfg)) spdlog::warn("config: {}", w);
    // The children inherit the raised limit; each SMTPS clamps its share of
    // max_connections to it and says so too.
    std::string warning;
    const smx::SmtpsLayout layout = smx::smtps_layout(cfg->server, smx::raise_nofile(), warning);
    if (!warning.empty()) spdlog::warn("{}", warning);
    // Few lines, each about a process coming or going: show them at once.
    spdlog::default_logger()->flush_on(spdlog::level::info);
    auto fatal = [&](const std::string& what) {
        report_stop(cfg->log, what);
        return exit_failed;
    };

    Plan plan;
    std::error_code ec;
    const fs::path dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (auto [name, path] : {std::pair{"smx-qmgr", &plan.qmgr_path},
                              std::pair{"smx-smtpc", &plan.smtpc_path},
                              std::pair{"smx-smtps", &plan.smtps_path},
                              std::pair{"smx-pickup", &plan.pickup_path}}) {
        auto found = find_child(dir, name, err);
        if (!found) return fatal(err);
        *path = *found;
    }

    if (accounts) {
        spdlog::info("children run as {} (smx-smtps, smx-pickup), {} (smx-qmgr), {} (smx-smtpc)",
                     accounts->smtps.name, accounts->qmgr.name, accounts->smtpc.name);
        if (accounts->qmgr.uid == 0) spdlog::warn("children run as root: server.user is root");
    } else {
        spdlog::info("not started as root: the children run as this user");
    }
    if (!make_dirs(*cfg, accounts ? &*accounts : nullptr, err)) return fatal(err);
    if (accounts && !check_reach(*cfg, args.config_path, *accounts, err)) return fatal(err);
    PidLock lock;
    if (!lock.acquire(cfg->run_dir_abs() + "/smx.pid", err)) return fatal(err);
    Listeners listeners;
    // server.threads and server.processes need a restart of smx run: a
    // restarted SMTPS runs as many loops as it gets sockets for, whatever the
    // file says by then.
    if (!listeners.open(cfg->server.listen, layout.processes * layout.loops, err))
        return fatal(err);
    std::string where;
    for (const auto& hp : cfg->server.listen) where += (where.empty() ? "" : ", ") + hp.str();
    spdlog::info("listening on {} with {} socket{} each, one per event loop of {} smx-smtps "
                 "process{} ({} loop{} each); spool {}",
                 where, listeners.loops(), listeners.loops() == 1 ? "" : "s", layout.processes,
                 layout.processes == 1 ? "" : "es", layout.loops, layout.loops == 1 ? "" : "s",
                 cfg->spool_dir_abs());

    if (!args.config_path.empty()) plan.config_path = fs::absolute(args.config_path).string();
    plan.qmgr_socket = cfg->qmgr_socket();
    plan.listen_fds = listeners.fds();
    plan.listen_loops = listeners.loops();
    plan.smtps_processes = layout.processes;
    // Kept open for the MCP's whole life, as the listeners are.
    if (layout.processes > 1 && (plan.session_counts = smx::SessionCounts::create(err)) < 0)
        return fatal(err);
    LogRelay relay;
    if (log_file >= 0) {
        if (!relay.start(err)) return fatal(err);
        plan.log_fd = relay.child_end();
    }
    plan.accounts = std::move(accounts);
    plan.secrets = std::move(*secrets);
    plan.config = *cfg;
    const int status = Supervisor(std::move(plan)).run();
    relay.stop();  // every child is gone: the last of their lines
    spdlog::default_logger()->flush();
    return status;
}

} // namespace smx::mcp
