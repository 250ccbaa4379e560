// smx-pickup: local submission's way into the queue, as postfix's pickup.
// Started by `smx run` as the SMTPS account (it writes content files as
// SMTPS does, and QMGR checks them as SMTPS's), it takes the files
// smx-postdrop wrote into <spool>/maildrop, checks each as hostile input,
// writes its message into the content store and commits it to QMGR
// (pickup/pickup.hpp), in an id stream of its own (smx::pickup_id_stream).
// Over its link to the MCP it says when it serves, or why it cannot start.
#include "pickup/maildrop_dir.hpp"
#include "pickup/pickup.hpp"

#include "libsm/await.hpp"
#include "libsm/channel.hpp"
#include "libsm/child_start.hpp"
#include "libsm/config.hpp"
#include "libsm/config_reload.hpp"
#include "libsm/ids.hpp"
#include "libsm/log.hpp"
#include "libsm/mcp_link.hpp"
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

#include <csignal>
#include <memory>

namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

constexpr auto qmgr_connect_window = 10s;
constexpr int exit_tempfail = 75;

} // namespace

int main(int argc, char** argv) {
    auto start = smx::start_child("smx-pickup", argc, argv);
    if (!start) return 2;
    const std::string& cfg_path = start->config_path;
    smx::McpLink& mcp = start->mcp;
    const smx::Config& cfg = start->config;
    smx::init_logging("pickup", cfg.log);
    smx::install_crash_handlers("pickup");
    smx::set_id_stream(smx::pickup_id_stream);
    std::signal(SIGPIPE, SIG_IGN);
    auto cannot_start = [&](int code, const std::string& why) {
        spdlog::critical("{}", why);
        spdlog::shutdown();
        mcp.cannot_start(why);
        return code;
    };
    std::unique_ptr<smx::pickup::MaildropDir> dir;
    std::shared_ptr<const smx::Rewriter> rewrite;
    auto milters = std::make_shared<const smx::MilterConfig>(cfg.milter);
    try {
        mcp.take_secrets();  // none: the link carries only the reports
        dir = std::make_unique<smx::pickup::MaildropDir>(cfg);
        rewrite = std::make_shared<const smx::Rewriter>(cfg.rewrite);
    } catch (const std::exception& e) {
        return cannot_start(1, e.what());
    }

    asio::io_context io(1);
    asio::thread_pool pool(1);
    int status = 0;
    std::unique_ptr<smx::pickup::Pickup> service;
    asio::signal_set signals(io, SIGTERM, SIGINT);
    signals.async_wait([&](const boost::system::error_code& ec, int sig) {
        if (ec) return;
        spdlog::info("signal {}: shutting down", sig);
        if (service) service->stop();
        else io.stop();
    });
    // SIGHUP from the MCP: a new server.max_message_size, [rewrite] and [milter] (the
    // MCP sent an empty bundle of secrets before it, as to every child with
    // a link). A rewrite table that cannot be opened refuses the reload.
    smx::ConfigReloader reloader(io, cfg_path, cfg, [&](smx::Config next) {
        mcp.take_secrets();
        rewrite = std::make_shared<const smx::Rewriter>(next.rewrite);
        milters = std::make_shared<const smx::MilterConfig>(next.milter);
        if (service) {
            service->set_rewriter(rewrite);
            service->set_milters(milters);
        }
        dir->set_max_size(next.server.max_message_size);
    });
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        const auto until = std::chrono::steady_clock::now() + qmgr_connect_window;
        std::string err;
        std::shared_ptr<smx::Channel> ch;
        while (!(ch = co_await smx::connect_qmgr(cfg.qmgr_socket(), "pickup", err))) {
            if (std::chrono::steady_clock::now() >= until) {
                status = cannot_start(exit_tempfail, "cannot reach qmgr: " + err);
                io.stop();
                co_return;
            }
            asio::steady_timer t(io, 200ms);
            co_await t.async_wait(smx::await_tuple);
        }
        service = std::make_unique<smx::pickup::Pickup>(io, *dir, ch, pool, rewrite, milters,
                                                         cfg.server.hostname);
        service->watch();
        spdlog::info("ready: taking mail from {}", dir->path());
        mcp.ready();
        status = co_await service->run();
        ch->close();
        signals.cancel();
        reloader.stop();
        io.stop();
    }, smx::crash_on_exception("pickup"));
    smx::run_or_panic(io, "pickup");
    pool.join();
    spdlog::info("exit {}", status);
    spdlog::shutdown();
    return status;
}
