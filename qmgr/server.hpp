// QMGR's Unix socket: accepts SMTPS, SMTPC and CLI peers, checks their HELLO
// (role and protocol version) and runs one coroutine per peer that feeds its
// records into Qmgr.
#pragma once

#include "qmgr.hpp"

#include "channel.hpp"
#include "config.hpp"

#include <boost/asio.hpp>
#include <memory>
#include <string>
#include <vector>

namespace smx::qmgr {

class Server {
public:
    Server(asio::io_context& io, const sm::Config& cfg, Qmgr& q);
    // Binds cfg.qmgr_socket() and starts accepting; false (with err) when
    // another QMGR answers there or the socket cannot be made.
    bool listen(std::string& err);
    // Stops accepting; peers stay connected until the process exits.
    void stop();

private:
    asio::awaitable<void> accept_loop();
    asio::awaitable<void> session(std::shared_ptr<sm::Channel> ch);
    asio::awaitable<void> smtps(std::shared_ptr<sm::Channel> ch);
    asio::awaitable<void> smtpc(std::shared_ptr<sm::Channel> ch);
    asio::awaitable<void> cli(std::shared_ptr<sm::Channel> ch);

    asio::io_context& io_;
    const sm::Config& cfg_;
    Qmgr& q_;
    asio::local::stream_protocol::acceptor acceptor_;
    std::string path_;
};

} // namespace smx::qmgr
