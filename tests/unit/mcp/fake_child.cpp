// Stand-in for smx-qmgr, smx-smtps, smx-smtpc and smx-pickup (chosen by argv[0]) so the
// supervisor can be tested alone:
//   smx-qmgr   answers HELLO and CTL requests on cfg.qmgr_socket()
//              ("stats" → counters, "hold" → an error, else echo);
//   smx-smtps  checks SMX_LISTEN_FDS and greets "220 fake" on each listener;
//   smx-smtpc, smx-pickup  idle.
// smx-smtps, smx-smtpc and smx-pickup say "ready" over their link to the MCP
// (SMX_MCP_FD) once they serve, and "NAME: ready" on stderr. All exit 0 on SIGTERM and 3 on SIGUSR1.
// FAKE_EXIT=N makes a child exit N at once, FAKE_IGNORE_TERM=1 makes it
// ignore SIGTERM, FAKE_CANNOT_START=NAME makes child NAME tell the MCP why it
// cannot start and exit 2, as a real one does on a config error.
#include "libsm/await.hpp"
#include "libsm/channel.hpp"
#include "libsm/config.hpp"
#include "libsm/mcp_link.hpp"
#include "libsm/panic.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

namespace asio = boost::asio;
using namespace smx;

namespace {

asio::awaitable<void> serve_peer(std::shared_ptr<Channel> ch) {
    while (auto f = co_await ch->read()) {
        std::string err;
        if (f->hdr.type == msg::HELLO) {
            ch->send(msg::encode(msg::HelloAck{0, "ok"}, f->hdr.req_id));
        } else if (auto req = msg::decode<msg::CtlRequest>(*f, err)) {
            msg::CtlReply r;
            if (req->command == "stats") {
                r.text = "received 12\ndelivered 10\nibdb_commits 3\nqueue_size 2\nstate running\n";
            } else if (req->command == "hold") {
                r = {1, "no such queue id"};
            } else {
                r.text = req->command;
                for (const auto& a : req->args) r.text += " " + a;
            }
            ch->send(msg::encode(r, f->hdr.req_id));
        }
    }
}

asio::awaitable<void> qmgr(std::string path) {
    auto ex = co_await asio::this_coro::executor;
    ::unlink(path.c_str());
    asio::local::stream_protocol::acceptor acc(ex, asio::local::stream_protocol::endpoint(path));
    for (;;) {
        auto s = co_await acc.async_accept(asio::use_awaitable);
        auto ch = std::make_shared<Channel>(std::move(s), "peer");
        ch->start();
        asio::co_spawn(ex, serve_peer(ch), smx::crash_on_exception("fake child: peer"));
    }
}

asio::awaitable<void> greet(int fd) {
    auto ex = co_await asio::this_coro::executor;
    asio::ip::tcp::acceptor acc(ex);
    int domain = 0;
    socklen_t len = sizeof domain;
    ::getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len);
    acc.assign(domain == AF_INET6 ? asio::ip::tcp::v6() : asio::ip::tcp::v4(), fd);
    for (;;) {
        auto s = co_await acc.async_accept(asio::use_awaitable);
        // A client gone before its greeting (a readiness probe) is no error.
        co_await asio::async_write(s, asio::buffer(std::string("220 fake\r\n")), smx::await_tuple);
    }
}

} // namespace

int main(int argc, char** argv) {
    const std::string name = std::filesystem::path(argv[0]).filename();
    std::string config;
    for (int i = 1; i + 1 < argc; ++i)
        if (std::string(argv[i]) == "-c") config = argv[i + 1];
    if (const char* e = std::getenv("FAKE_EXIT")) return std::atoi(e);
    const smx::McpLink mcp = smx::McpLink::from_env();
    if (const char* e = std::getenv("FAKE_CANNOT_START"); e && name == e) {
        std::cerr << name << ": fake reason\n";
        mcp.cannot_start("fake reason\nwith a second line");
        return 2;
    }

    asio::io_context io;
    auto work = asio::make_work_guard(io);  // smx-smtpc has nothing else to wait for
    int status = 0;
    asio::signal_set sigs(io, SIGTERM, SIGINT);
    if (!std::getenv("FAKE_IGNORE_TERM")) sigs.async_wait([&](auto, int) { io.stop(); });
    else ::signal(SIGTERM, SIG_IGN);
    asio::signal_set usr1(io, SIGUSR1);
    usr1.async_wait([&](auto, int) {
        status = 3;
        io.stop();
    });

    const Config cfg = load_config(config);
    if (name == "smx-qmgr") {
        asio::co_spawn(io, qmgr(cfg.qmgr_socket()), smx::crash_on_exception("fake smx-qmgr"));
    } else if (name == "smx-smtps") {
        const char* fds = std::getenv("SMX_LISTEN_FDS");
        if (!fds) {
            std::cerr << "fake smx-smtps: no SMX_LISTEN_FDS\n";
            return 3;
        }
        std::stringstream ss(fds);
        for (std::string fd; std::getline(ss, fd, ',');) {
            int on = 0;
            socklen_t len = sizeof on;
            if (::getsockopt(std::stoi(fd), SOL_SOCKET, SO_ACCEPTCONN, &on, &len) != 0 || !on) {
                std::cerr << "fake smx-smtps: fd " << fd << " is not a listener\n";
                return 4;
            }
            asio::co_spawn(io, greet(std::stoi(fd)), smx::crash_on_exception("fake smx-smtps"));
        }
    }
    mcp.ready();
    // One write: the children share the stderr the test reads.
    std::cerr << (std::string(name) + ": ready\n");
    smx::run_or_panic(io, "fake child");
    return status;
}
