// QMGR's Unix socket: accepts SMTPS, SMTPC and CLI peers, checks their HELLO
// (role and protocol version) against who they are (SO_PEERCRED) and runs
// one coroutine per peer that feeds its records into Qmgr.
#pragma once

#include "qmgr/qmgr.hpp"

#include "libsm/channel.hpp"
#include "libsm/config.hpp"

#include <boost/asio.hpp>
#include <sys/types.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace smx::qmgr {

class Server {
public:
    Server(asio::io_context& io, const smx::Config& cfg, Qmgr& q);
    // Binds cfg.qmgr_socket() and starts accepting; false (with err) when
    // another QMGR answers there or the socket cannot be made.
    bool listen(std::string& err);
    // Stops accepting; peers stay connected until the process exits.
    void stop();

    // A peer's account, from the kernel (SO_PEERCRED, SO_PEERGROUPS).
    struct Peer {
        uid_t uid = 0;
        std::vector<gid_t> groups;  // with the primary one
    };

private:
    // What a CLI peer may ask for: stats and queue, or also the commands
    // that change the queue (hold, release, delete, flush).
    enum class Access { none, read, admin };

    // Started by root, each child runs as its own account and a role is
    // only taken from it; otherwise all run as our user, who may claim any.
    bool may_claim(const Peer& p, const std::string& role) const;
    Access access(const Peer& p) const;

    asio::awaitable<void> accept_loop();
    asio::awaitable<void> session(std::shared_ptr<smx::Channel> ch, Peer peer);
    // SMTPS, or smx-pickup (pickup: no load reports, its own id stream).
    asio::awaitable<void> smtps(std::shared_ptr<smx::Channel> ch, bool pickup);
    asio::awaitable<void> smtpc(std::shared_ptr<smx::Channel> ch);
    asio::awaitable<void> cli(std::shared_ptr<smx::Channel> ch, Access access);

    asio::io_context& io_;
    const smx::Config& cfg_;
    Qmgr& q_;
    asio::local::stream_protocol::acceptor acceptor_;
    std::string path_;
    uid_t self_, smtps_uid_, smtpc_uid_;
    std::optional<gid_t> admin_gid_, stats_gid_;
};

} // namespace smx::qmgr
