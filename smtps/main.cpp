// smx-smtps: the SMTP server process. Runs several event loops (Asio's
// io_context per CPU, server.threads): each accepts on its own listening
// socket of every address (one SO_REUSEPORT group per address, so the kernel
// spreads connections over the loops), has its own QMGR link and runs its
// sessions as coroutines; the connection limits and the reloadable settings
// are shared (smx::smtps::Shared). The sockets come from the MCP (SMX_LISTEN_FDS,
// SMX_LISTEN_LOOPS; SMX_SMTPS_PROCESS when it is one of several), else it
// binds server.listen itself. The certificate and key come from the MCP as
// bytes (SMX_MCP_FD, libsm/mcp_link.hpp), never from their files; over the
// same link the process says when it serves, or why it cannot start. The
// first loop runs on the main thread and also owns the signals, the reload
// and the shutdown.
#include "libsm/await.hpp"
#include "libsm/channel.hpp"
#include "libsm/child_start.hpp"
#include "libsm/config.hpp"
#include "libsm/config_reload.hpp"
#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"
#include "libsm/limits.hpp"
#include "libsm/listen.hpp"
#include "libsm/log.hpp"
#include "libsm/mcp_link.hpp"
#include "libsm/panic.hpp"
#include "libsm/session_counts.hpp"
#include "libsm/tls.hpp"
#include "smtps/content_writer.hpp"
#include "smtps/qmgr_client.hpp"
#include "smtps/server.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto qmgr_connect_window = 10s;
constexpr auto ack_timeout = 60s;
// How long a shutdown waits for sessions that are committing a message.
constexpr auto drain_window = 2s;
constexpr int exit_tempfail = 75;  // EX_TEMPFAIL: the MCP restarts us

// The listening fds loop by loop (smx::listen_all's order) and how many loops
// they are for: the MCP's, else bound here for server.threads loops.
struct ListenFds {
    std::vector<int> fds;
    unsigned loops = 1;
    bool inherited = false;
};

ListenFds listen_fds(const smx::Config& cfg) {
    ListenFds out;
    const char* fds = std::getenv("SMX_LISTEN_FDS");
    if (!fds || !*fds) {
        out.loops = smx::event_loops(cfg.server.threads);
        std::string err;
        if (!smx::listen_all(cfg.server.listen, out.loops, out.fds, err))
            throw std::runtime_error(err);
        return out;
    }
    out.inherited = true;
    std::stringstream ss(fds);
    for (std::string item; std::getline(ss, item, ',');) out.fds.push_back(std::stoi(item));
    const char* loops = std::getenv("SMX_LISTEN_LOOPS");
    out.loops = loops && *loops ? static_cast<unsigned>(std::stoul(loops)) : 1;
    if (out.loops == 0 || out.loops > out.fds.size() || out.fds.size() % out.loops != 0)
        throw std::runtime_error("SMX_LISTEN_LOOPS=" + std::to_string(out.loops) +
                                 " does not divide the " + std::to_string(out.fds.size()) +
                                 " SMX_LISTEN_FDS");
    return out;
}

// This process's place among the smx-smtps processes of `smx run`
// (SMX_SMTPS_PROCESS=i/n, smx::smtps_layout, and the session counts they
// share in SMX_SMTPS_COUNTS); alone, 0 of 1 and no counts.
struct Place {
    unsigned index = 0, count = 1;
    std::unique_ptr<smx::SessionCounts> counts;
};

Place process_place() {
    Place out;
    const char* v = std::getenv("SMX_SMTPS_PROCESS");
    if (!v || !*v) return out;
    char end = 0;
    if (std::sscanf(v, "%u/%u%c", &out.index, &out.count, &end) != 2 || out.count == 0 ||
        out.count > smx::max_smtps_processes || out.index >= out.count)
        throw std::runtime_error(std::string("SMX_SMTPS_PROCESS=") + v +
                                 " is not i/n with i < n <= " +
                                 std::to_string(smx::max_smtps_processes));
    const char* c = std::getenv("SMX_SMTPS_COUNTS");
    if (out.count > 1) {
        if (!c || !*c) throw std::runtime_error("SMX_SMTPS_PROCESS without SMX_SMTPS_COUNTS");
        out.counts = std::make_unique<smx::SessionCounts>(std::atoi(c));
    }
    return out;
}

// This process's part of the server-wide limits (max_connections holds for
// all processes together through the shared counts); returns the sessions
// its own descriptors allow with the `loops` event loops it runs (with
// threads = 0 the MCP shares the CPUs out, so fewer than event_loops(0)).
unsigned take_share(smx::ServerConfig& s, const Place& place, unsigned loops) {
    const unsigned long nofile = smx::raise_nofile();
    smx::ServerConfig share = smx::process_share(s, place.count);
    share.threads = loops;
    std::string warning;
    smx::fitting_connections(share, nofile, warning);
    if (!warning.empty())
        spdlog::warn("{}{}", warning, place.count > 1 ? " (this process's share)" : "");
    const unsigned fitting = smx::sessions_fitting(share, nofile);
    share.max_connections = s.max_connections;
    share.threads = s.threads;
    s = std::move(share);
    return fitting;
}

tcp::acceptor acceptor_for(asio::io_context& io, int fd) {
    sockaddr_storage sa{};
    socklen_t len = sizeof sa;
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
        throw std::runtime_error("listening fd " + std::to_string(fd) + " is not a socket");
    return tcp::acceptor(io, sa.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd);
}

// One event loop: its thread's io_context, its own listening socket of each
// address, its QMGR link and the sessions it accepted. Only its own thread
// touches it after start.
struct Loop {
    asio::io_context io{1};
    std::vector<tcp::acceptor> listeners;
    std::unique_ptr<smx::smtps::QmgrClient> qmgr;
    std::unique_ptr<smx::smtps::Server> server;
};

// The event loops over the listening sockets (`lf.loops` of them, each
// with its own socket of every address).
std::vector<std::unique_ptr<Loop>> make_loops(const ListenFds& lf) {
    std::vector<std::unique_ptr<Loop>> loops;
    const std::size_t per_loop = lf.fds.size() / lf.loops;
    for (unsigned i = 0; i < lf.loops; ++i) {
        auto& l = *loops.emplace_back(std::make_unique<Loop>());
        for (std::size_t a = 0; a < per_loop; ++a)
            l.listeners.push_back(acceptor_for(l.io, lf.fds[i * per_loop + a]));
    }
    return loops;
}

struct Process {
    const smx::Config& cfg;
    smx::smtps::ContentStore& store;
    std::shared_ptr<smx::smtps::Shared> shared;
    std::vector<std::unique_ptr<Loop>> loops;  // loops[0] runs on the main thread
    const smx::McpLink& mcp;
    int exit_code = 0;                         // main thread only
    std::atomic<bool> stopping = false;
    std::atomic<std::size_t> serving = 0;      // loops that have started serving

    asio::io_context& main_io() { return loops[0]->io; }

    // Runs on l's thread: connects l's QMGR link, then serves l's listeners.
    // index: the loop's among all smx-smtps processes' (stats, metrics).
    asio::awaitable<void> start(Loop& l, unsigned index, unsigned of) {
        const auto until = std::chrono::steady_clock::now() + qmgr_connect_window;
        std::string err;
        std::shared_ptr<smx::Channel> ch;
        while (!(ch = co_await smx::connect_qmgr(cfg.qmgr_socket(), "smtps", err))) {
            if (stopping) co_return;
            if (std::chrono::steady_clock::now() >= until) {
                spdlog::error("cannot reach qmgr: {}", err);
                mcp.cannot_start("cannot reach qmgr: " + err);
                stop_from_any(exit_tempfail);
                co_return;
            }
            asio::steady_timer t(l.io, 200ms);
            co_await t.async_wait(smx::await_tuple);
        }
        if (stopping) co_return;
        l.qmgr = std::make_unique<smx::smtps::QmgrClient>(l.io.get_executor(), ch, ack_timeout, [this] {
            spdlog::error("lost connection to qmgr; exiting after answering open transactions");
            stop_from_any(exit_tempfail);
        });
        l.qmgr->start();
        l.server = std::make_unique<smx::smtps::Server>(l.io.get_executor(), shared, *l.qmgr, store,
                                                  static_cast<unsigned>(loops.size()));
        for (auto& a : l.listeners) l.server->listen(std::move(a));
        l.listeners.clear();
        l.server->start_load_reports(index);
        spdlog::info("ready: {} ESMTP, qmgr at {} (event loop {} of {})", cfg.server.hostname,
                     cfg.qmgr_socket(), index + 1, of);
        if (++serving == loops.size()) mcp.ready();
    }

    void stop_from_any(int code) {
        asio::post(main_io(), [this, code] { stop(code); });
    }

    // Main thread only.
    void stop(int code) {
        if (stopping.exchange(true)) return;
        exit_code = code;
        asio::co_spawn(main_io(), drain(), smx::crash_on_exception("smtps drain"));
    }

    asio::awaitable<void> drain() {
        for (std::size_t i = 0; i < loops.size(); ++i)
            asio::post(loops[i]->io, [&l = *loops[i], i, n = loops.size()] {
                if (!l.server) return;
                l.server->stop_accepting();
                // How evenly the kernel spread the connections.
                spdlog::info("event loop {} of {}: {} connections accepted", i + 1, n,
                             l.server->accepted());
            });
        const auto until = std::chrono::steady_clock::now() + drain_window;
        while (shared->committing() > 0 && std::chrono::steady_clock::now() < until) {
            asio::steady_timer t(main_io(), 10ms);
            co_await t.async_wait(smx::await_tuple);
        }
        for (auto& l : loops)
            asio::post(l->io, [&l = *l] {
                if (l.qmgr) l.qmgr->close();
                l.io.stop();
            });
    }
};

} // namespace

int main(int argc, char** argv) {
    auto start = smx::start_child("smx-smtps", argc, argv);
    if (!start) return 2;
    const std::string& cfg_path = start->config_path;
    smx::McpLink& mcp = start->mcp;
    smx::Config& cfg = start->config;
    smx::init_logging("smtpd", cfg.log);
    smx::install_crash_handlers("smtps");
    // Why this process cannot start: to the log and to smx run, which stops.
    auto cannot_start = [&](int code, const std::string& why) {
        spdlog::critical("{}", why);
        spdlog::shutdown();
        mcp.cannot_start(why);
        return code;
    };
    Place place;
    try {
        place = process_place();
    } catch (const std::exception& e) {
        return cannot_start(2, e.what());
    }
    smx::set_id_stream(place.index);
    ListenFds lf;
    std::vector<std::unique_ptr<Loop>> loops;
    try {
        lf = listen_fds(cfg);
        loops = make_loops(lf);
    } catch (const std::exception& e) {
        return cannot_start(1, std::string("cannot listen: ") + e.what());
    }
    if (const unsigned asked = smx::loops_per_process(cfg.server.threads, place.count);
        lf.inherited && asked != lf.loops)
        spdlog::warn("server.threads asks for {} event loops; running {}, as many as the listening "
                     "sockets smx run bound at its start (a restart of smx run applies it)",
                     asked, lf.loops);
    const unsigned own_max = take_share(cfg.server, place, lf.loops);
    std::signal(SIGPIPE, SIG_IGN);

    // fdatasync of content files (content_sync = "file"): a sync of a new file
    // takes milliseconds, the threads mostly sleep in the kernel, and
    // concurrent syncs share journal commits, so throughput grows with the
    // number in flight. With "batch" QMGR syncs content; the pool only
    // creates and writes, which can still wait for the journal.
    const bool sync_each = cfg.queue.content_sync == smx::QueueConfig::ContentSync::file &&
                           !cfg.queue.test_no_sync;
    asio::thread_pool sync_pool(sync_each ? 32 : 4);
    smx::smtps::ContentStore store(cfg.content_dir_abs(), cfg.queue.cdb_hashed, sync_pool,
                              cfg.queue.min_free_space, sync_each, smx::content::sync_names(cfg),
                              cfg.queue.content_segments
                            ? std::chrono::duration_cast<std::chrono::milliseconds>(
                                  cfg.queue.segment_age) / 6
                            : std::chrono::milliseconds(0));
    if (const auto n = store.remove_stale_tmp())
        spdlog::info("removed {} unfinished content files of an earlier run", n);
    // One TLS context for all sessions of all loops (its session cache and
    // ticket keys are then shared), built before anything listens.
    std::unique_ptr<asio::ssl::context> tls;
    try {
        const smx::Secrets& secrets = mcp.take_secrets();
        if (cfg.server.tls_security_level != smx::TlsLevel::none)
            tls = smx::tls::server_context(cfg.server, secrets);
    } catch (const std::exception& e) {
        return cannot_start(2, std::string("TLS: ") + e.what());
    }
    std::shared_ptr<smx::smtps::Shared> shared;
    try {
        shared = std::make_shared<smx::smtps::Shared>(cfg, tls.get());
    } catch (const smx::ConfigError& e) {
        return cannot_start(2, e.what());  // a [policy] table that cannot be opened
    } catch (const smx::table::TableError& e) {
        return cannot_start(2, e.what());  // a [rewrite] table
    }
    Process p{cfg, store, std::move(shared), std::move(loops), mcp};
    p.shared->limit_process(own_max, place.counts.get(), place.index);
    const auto n_loops = static_cast<unsigned>(p.loops.size());

    asio::signal_set signals(p.main_io(), SIGTERM, SIGINT);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        spdlog::info("signal {}: shutting down", sig);
        p.stop(0);
    });
    // SIGHUP from the MCP: new sessions, on every loop, get the new config
    // and certificate (the MCP passed it just before).
    smx::ConfigReloader reloader(p.main_io(), cfg_path, cfg, [&](smx::Config next) {
        const smx::Secrets& secrets = mcp.take_secrets();
        take_share(next.server, place, n_loops);
        std::shared_ptr<asio::ssl::context> ctx;
        if (next.server.tls_security_level != smx::TlsLevel::none)
            ctx = smx::tls::server_context(next.server, secrets);
        p.shared->reload(std::make_shared<const smx::Config>(std::move(next)), std::move(ctx));
    });
    for (unsigned i = 0; i < n_loops; ++i)
        asio::co_spawn(p.loops[i]->io,
                       p.start(*p.loops[i], place.index * n_loops + i, place.count * n_loops),
                       smx::crash_on_exception("smtps start"));
    std::vector<std::thread> threads;
    for (unsigned i = 1; i < n_loops; ++i)
        threads.emplace_back([&l = *p.loops[i]] { smx::run_or_panic(l.io, "smtps"); });
    smx::run_or_panic(p.main_io(), "smtps");
    for (auto& t : threads) t.join();
    sync_pool.join();
    spdlog::info("exit {}", p.exit_code);
    spdlog::shutdown();
    return p.exit_code;
}
