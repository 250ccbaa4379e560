// smx-smtps: the SMTP server process. Takes its listening sockets from the
// MCP (SMX_LISTEN_FDS) or binds server.listen itself, connects to QMGR, and
// runs every session as a coroutine on one io thread.
#include "cdb_writer.hpp"
#include "channel.hpp"
#include "config.hpp"
#include "config_reload.hpp"
#include "limits.hpp"
#include "log.hpp"
#include "panic.hpp"
#include "qmgr_client.hpp"
#include "server.hpp"
#include "tls.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <csignal>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <sstream>

namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

constexpr auto qmgr_connect_window = 10s;
constexpr auto ack_timeout = 60s;
// How long a shutdown waits for sessions that are committing a message.
constexpr auto drain_window = 2s;
constexpr int exit_tempfail = 75;  // EX_TEMPFAIL: the MCP restarts us

std::vector<tcp::acceptor> inherited_listeners(asio::io_context& io, const char* fds) {
    std::vector<tcp::acceptor> out;
    std::stringstream ss(fds);
    for (std::string item; std::getline(ss, item, ',');) {
        const int fd = std::stoi(item);
        sockaddr_storage sa{};
        socklen_t len = sizeof sa;
        if (::getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
            throw std::runtime_error("SMX_LISTEN_FDS: fd " + item + " is not a socket");
        out.emplace_back(io, sa.ss_family == AF_INET6 ? tcp::v6() : tcp::v4(), fd);
    }
    return out;
}

std::vector<tcp::acceptor> bound_listeners(asio::io_context& io, const sm::Config& cfg) {
    std::vector<tcp::acceptor> out;
    tcp::resolver resolver(io);
    for (const auto& hp : cfg.server.listen) {
        for (const auto& r : resolver.resolve(hp.host, std::to_string(hp.port),
                                              tcp::resolver::numeric_service)) {
            tcp::acceptor a(io, r.endpoint().protocol());
            a.set_option(tcp::acceptor::reuse_address(true));
            if (r.endpoint().address().is_v6()) a.set_option(asio::ip::v6_only(true));
            a.bind(r.endpoint());
            a.listen(asio::socket_base::max_listen_connections);
            out.push_back(std::move(a));
        }
    }
    return out;
}

struct Process {
    asio::io_context& io;
    const sm::Config& cfg;
    smtps::CdbStore& cdb;
    asio::ssl::context* tls;
    std::vector<tcp::acceptor> listeners;
    std::unique_ptr<smtps::QmgrClient> qmgr;
    std::unique_ptr<smtps::Server> server;
    int exit_code = 0;
    bool stopping = false;

    asio::awaitable<void> start() {
        const auto until = std::chrono::steady_clock::now() + qmgr_connect_window;
        std::string err;
        std::shared_ptr<sm::Channel> ch;
        while (!(ch = co_await sm::connect_qmgr(cfg.qmgr_socket(), "smtps", err))) {
            if (stopping) co_return;
            if (std::chrono::steady_clock::now() >= until) {
                spdlog::error("cannot reach qmgr: {}", err);
                exit_code = exit_tempfail;
                io.stop();
                co_return;
            }
            asio::steady_timer t(io, 200ms);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (stopping) co_return;
        qmgr = std::make_unique<smtps::QmgrClient>(io.get_executor(), ch, ack_timeout, [this] {
            spdlog::error("lost connection to qmgr; exiting after answering open transactions");
            stop(exit_tempfail);
        });
        qmgr->start();
        server = std::make_unique<smtps::Server>(io.get_executor(), cfg, *qmgr, cdb, tls);
        for (auto& l : listeners) server->listen(std::move(l));
        listeners.clear();
        spdlog::info("ready: {} ESMTP, qmgr at {}", cfg.server.hostname, cfg.qmgr_socket());
    }

    void stop(int code) {
        if (stopping) return;
        stopping = true;
        exit_code = code;
        asio::co_spawn(io, drain(), sm::crash_on_exception("smtps drain"));
    }

    asio::awaitable<void> drain() {
        if (server) server->stop_accepting();
        const auto until = std::chrono::steady_clock::now() + drain_window;
        while (server && server->committing() > 0 && std::chrono::steady_clock::now() < until) {
            asio::steady_timer t(io, 10ms);
            co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
        }
        if (qmgr) qmgr->close();
        io.stop();
    }
};

} // namespace

int main(int argc, char** argv) {
    std::string cfg_path;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-c" && i + 1 < argc) {
            cfg_path = argv[++i];
        } else {
            std::cerr << "usage: smx-smtps [-c FILE]\n";
            return 2;
        }
    }
    sm::Config cfg;
    try {
        cfg = sm::load_config(cfg_path);
    } catch (const std::exception& e) {
        std::cerr << "smx-smtps: config " << (cfg_path.empty() ? "(defaults)" : cfg_path)
                  << ": " << e.what() << "\n";
        return 2;
    }
    sm::init_logging("smtps", cfg.log);
    sm::install_crash_handlers("smtps");
    {
        std::string warning;
        cfg.server.max_connections =
            sm::fitting_connections(cfg.server, sm::raise_nofile(), warning);
        if (!warning.empty()) spdlog::warn("{}", warning);
    }
    std::signal(SIGPIPE, SIG_IGN);
    if (cfg.server.threads > 1)
        spdlog::warn("server.threads = {}: running single-threaded", cfg.server.threads);

    asio::io_context io(1);
    // fdatasync of CDB files (content_sync = "file"): a sync of a new file
    // takes milliseconds, the threads mostly sleep in the kernel, and
    // concurrent syncs share journal commits, so throughput grows with the
    // number in flight. With "batch" QMGR syncs content; the pool only
    // creates, writes and renames, which can still wait for the journal.
    const bool sync_each = cfg.queue.content_sync == sm::QueueConfig::ContentSync::file &&
                           !cfg.queue.test_no_sync;
    asio::thread_pool sync_pool(sync_each ? 32 : 4);
    smtps::CdbStore cdb(cfg.spool_dir_abs(), cfg.queue.cdb_hashed, sync_pool,
                        cfg.queue.min_free_space, sync_each);
    if (const auto n = cdb.remove_stale_tmp())
        spdlog::info("removed {} unfinished CDB files of an earlier run", n);
    // One TLS context for all sessions (its session cache and ticket keys
    // are then shared), built before anything listens.
    std::unique_ptr<asio::ssl::context> tls;
    if (cfg.server.tls_security_level != sm::TlsLevel::none) {
        try {
            tls = sm::tls::server_context(cfg.server);
        } catch (const std::exception& e) {
            spdlog::critical("TLS: {}", e.what());
            spdlog::shutdown();
            return 2;
        }
    }
    Process p{io, cfg, cdb, tls.get(), {}, nullptr, nullptr};
    try {
        const char* fds = std::getenv("SMX_LISTEN_FDS");
        p.listeners = fds && *fds ? inherited_listeners(io, fds) : bound_listeners(io, cfg);
    } catch (const std::exception& e) {
        spdlog::critical("cannot listen: {}", e.what());
        spdlog::shutdown();
        return 1;
    }

    asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        spdlog::info("signal {}: shutting down", sig);
        p.stop(0);
    });
    // SIGHUP from the MCP: new sessions get the new config and certificate.
    sm::ConfigReloader reloader(io, cfg_path, cfg, [&](sm::Config next) {
        if (!p.server) throw std::runtime_error("smx-smtps is still starting");
        std::string warning;
        next.server.max_connections =
            sm::fitting_connections(next.server, sm::raise_nofile(), warning);
        if (!warning.empty()) spdlog::warn("{}", warning);
        std::shared_ptr<asio::ssl::context> ctx;
        if (next.server.tls_security_level != sm::TlsLevel::none)
            ctx = sm::tls::server_context(next.server);
        p.server->reload(std::make_shared<const sm::Config>(std::move(next)), std::move(ctx));
    });
    asio::co_spawn(io, p.start(), sm::crash_on_exception("smtps start"));
    sm::run_or_panic(io, "smtps");
    sync_pool.join();
    spdlog::info("exit {}", p.exit_code);
    spdlog::shutdown();
    return p.exit_code;
}
