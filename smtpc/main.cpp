// smx-smtpc: the outbound SMTP client process. Connects to QMGR as role
// "smtpc", delivers what it is told to, and answers with per-recipient
// results. Exits 75 when QMGR goes away (the MCP restarts it), 2 on a bad
// configuration. The CA bundle and the SASL passwords come from the MCP as
// bytes (SMX_MCP_FD, libsm/mcp_link.hpp), never from their files; over the
// same link the process says when it serves, or why it cannot start.
#include "libsm/await.hpp"
#include "smtpc/agent.hpp"
#include "smtpc/connection_cache.hpp"
#include "smtpc/delivery.hpp"
#include "smtpc/nexthop.hpp"
#include "smtpc/tls_sessions.hpp"

#include "libsm/channel.hpp"
#include "libsm/config.hpp"
#include "libsm/config_reload.hpp"
#include "libsm/credentials.hpp"
#include "libsm/limits.hpp"
#include "libsm/log.hpp"
#include "libsm/mcp_link.hpp"
#include "libsm/panic.hpp"
#include "libsm/tls.hpp"

#include <ares.h>
#include <csignal>
#include <cstring>
#include <iostream>
#include <spdlog/spdlog.h>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr int exit_config = 2;
constexpr int exit_tempfail = 75;  // EX_TEMPFAIL

// QMGR is started first but may still be opening its socket.
asio::awaitable<std::shared_ptr<smx::Channel>> connect_with_retry(const std::string& path,
                                                                 const smx::McpLink& mcp) {
    const auto give_up = std::chrono::steady_clock::now() + 10s;
    asio::steady_timer pause(co_await asio::this_coro::executor);
    for (;;) {
        std::string err;
        auto ch = co_await smx::connect_qmgr(path, "smtpc", err);
        if (ch) co_return ch;
        if (std::chrono::steady_clock::now() >= give_up) {
            spdlog::error("cannot connect to qmgr: {}", err);
            mcp.cannot_start("cannot connect to qmgr: " + err);
            co_return nullptr;
        }
        pause.expires_after(200ms);
        co_await pause.async_wait(smx::await_tuple);
    }
}

int usage() {
    std::cerr << "usage: smx-smtpc [-c FILE]\n";
    return exit_config;
}

} // namespace

int main(int argc, char** argv) {
    std::string cfg_path;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-c") == 0 && i + 1 < argc) {
            cfg_path = argv[++i];
        } else {
            return usage();
        }
    }
    smx::McpLink mcp;
    smx::Config cfg;
    std::unique_ptr<asio::ssl::context> tls;  // one for every connection
    smx::CredentialMap creds;
    try {
        mcp = smx::McpLink::from_env();
        cfg = smx::load_config(cfg_path);
        const smx::Secrets& secrets = mcp.take_secrets();
        tls = smx::tls::client_context(cfg.client, secrets);
        creds = smx::credentials(cfg.client, secrets);
    } catch (const std::exception& e) {
        std::cerr << "smx-smtpc: bad config: " << e.what() << "\n";
        mcp.cannot_start(std::string("bad config: ") + e.what());
        return exit_config;
    }
    smx::init_logging("smtp", cfg.log);
    smx::install_crash_handlers("smtpc");
    smx::raise_nofile();  // up to max_concurrency connections per destination
    std::signal(SIGPIPE, SIG_IGN);
    ares_library_init(ARES_LIB_INIT_ALL);

    int rc = 0;
    {
        asio::io_context io(1);
        smx::smtpc::Resolver dns(io.get_executor());
        if (!dns.configure(cfg)) {
            const std::string why =
                "client.dns_servers: c-ares refused '" + cfg.client.dns_servers_csv() + "'";
            spdlog::critical("{}", why);
            mcp.cannot_start(why);
            return exit_config;
        }
        smx::smtpc::ConnectionCache cache(cfg.client);
        // Sessions of about as many next hops as postfix's default
        // smtp_tls_session_cache keeps in practice; each is a few KB.
        constexpr std::size_t tls_session_hops = 1000;
        smx::smtpc::TlsSessions resume(*tls, tls_session_hops);
        smx::smtpc::Deliverer deliverer(cfg, dns, cache, tls.get(), &creds, &resume);

        // A reload takes the secrets the MCP passed just before (bad ones
        // refuse the reload) and starts a new session cache: sessions of
        // the old context may have been verified against other settings.
        smx::ConfigReloader reloader(io, cfg_path, cfg, [&](smx::Config next) {
            const smx::Secrets& secrets = mcp.take_secrets();
            auto creds = std::make_shared<smx::CredentialMap>(smx::credentials(next.client, secrets));
            std::shared_ptr<asio::ssl::context> ctx = smx::tls::client_context(next.client, secrets);
            auto sessions = std::make_shared<smx::smtpc::TlsSessions>(*ctx, tls_session_hops);
            deliverer.reload(std::make_shared<const smx::Config>(std::move(next)), std::move(ctx),
                             std::move(creds), std::move(sessions));
        });
        asio::signal_set signals(io, SIGTERM, SIGINT);
        signals.async_wait([&](boost::system::error_code ec, int sig) {
            if (ec) return;
            spdlog::info("signal {}: stopping", sig);
            cache.close_all();
            io.stop();
        });
        asio::co_spawn(io, [&]() -> asio::awaitable<void> {
            auto ch = co_await connect_with_retry(cfg.qmgr_socket(), mcp);
            if (ch) {
                spdlog::info("connected to qmgr at {}", cfg.qmgr_socket());
                mcp.ready();
                co_await smx::smtpc::serve_qmgr(ch, deliverer);
                spdlog::warn("lost connection to qmgr; exiting");
            }
            rc = exit_tempfail;
            cache.close_all();
            io.stop();
        }, smx::crash_on_exception("smtpc main"));
        smx::run_or_panic(io, "smtpc");
    }
    ares_library_cleanup();
    spdlog::shutdown();
    return rc;
}
