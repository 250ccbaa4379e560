#include "qmgr/server.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include "libsm/accept.hpp"
#include "libsm/panic.hpp"

#include <grp.h>
#include <pwd.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <tuple>

namespace smx::qmgr {

namespace {

using namespace asio::experimental::awaitable_operators;
using stream = asio::local::stream_protocol;

constexpr auto hello_timeout = std::chrono::seconds(10);
constexpr auto cli_timeout = std::chrono::seconds(30);

using smx::read_within;

// Refuses a peer: the HELLO_ACK must reach it before the socket closes, so
// wait (briefly) for the peer to hang up first.
asio::awaitable<void> refuse(std::shared_ptr<smx::Channel> ch, const std::string& why) {
    spdlog::warn("{}: refused: {}", ch->peer(), why);
    ch->send(smx::msg::encode(smx::msg::HelloAck{1, why}));
    co_await read_within(*ch, std::chrono::seconds(2));
    ch->close();
}

// The next record of a peer, which must be of type T: the record, or the
// req_id of an oversize one (refused by the caller for that request only);
// nullopt at EOF or on a protocol error (logged: the peer is then dropped).
template <class T>
struct Next {
    std::optional<T> rec;  // empty: oversize
    std::uint64_t req_id = 0;
};
template <class T>
std::optional<Next<T>> take(const smx::Channel& ch, const smx::rec::Frame& f, std::uint16_t type) {
    std::string err;
    Next<T> n{std::nullopt, f.hdr.req_id};
    if (f.hdr.type != type) err = "unexpected record type " + std::to_string(f.hdr.type);
    else if (f.oversize) return n;
    else n.rec = smx::msg::decode<T>(f, err);
    if (!n.rec) {
        spdlog::error("{}: protocol error: {}; dropping the peer", ch.peer(), err);
        return std::nullopt;
    }
    return n;
}
// A record of a few fields, which no peer sends over the frame limit:
// nullopt (logged) when it is malformed or oversize, and the peer goes.
template <class T>
std::optional<T> small(const smx::Channel& ch, const smx::rec::Frame& f, std::uint16_t type,
                       const char* name) {
    auto n = take<T>(ch, f, type);
    if (!n) return std::nullopt;
    if (!n->rec) spdlog::error("{}: protocol error: oversize {}; dropping the peer", ch.peer(), name);
    return std::move(n->rec);
}
template <class T>
asio::awaitable<std::optional<Next<T>>> next(smx::Channel& ch, std::uint16_t type) {
    auto f = co_await ch.read();
    if (!f) co_return std::nullopt;
    co_return take<T>(ch, *f, type);
}

std::optional<uid_t> uid_of(const smx::Config& cfg, smx::ServerConfig::Process p) {
    const passwd* pw = ::getpwnam(cfg.server.user_for(p).c_str());
    if (!pw) return std::nullopt;
    return pw->pw_uid;
}

// The account behind a connected Unix socket, as the kernel recorded it at
// connect(); nullopt only when the kernel will not say.
std::optional<Server::Peer> peer_of(int fd) {
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return std::nullopt;
    Server::Peer p{cred.uid, std::vector<gid_t>(64)};
    for (int attempt = 0; attempt < 2; ++attempt) {
        len = static_cast<socklen_t>(p.groups.size() * sizeof(gid_t));
        if (::getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, p.groups.data(), &len) == 0) break;
        if (errno != ERANGE) return std::nullopt;
        p.groups.resize(len / sizeof(gid_t));  // ERANGE: len is the size needed
    }
    p.groups.resize(len / sizeof(gid_t));
    p.groups.push_back(cred.gid);
    return p;
}

// stats, queue and qshape only read envelopes; every other command changes
// the queue, or (show) reads a message's headers.
bool reads_only(const std::string& command) {
    return command == "stats" || command == "queue" || command == "qshape";
}

} // namespace

Server::Server(asio::io_context& io, const smx::Config& cfg, Qmgr& q)
    : io_(io), cfg_(cfg), q_(q), acceptor_(io), self_(::geteuid()), smtps_uid_(self_),
      smtpc_uid_(self_) {}

bool Server::may_claim(const Peer& p, const std::string& role) const {
    // smx-pickup runs as SMTPS's account (it writes content files as SMTPS does).
    if (role == "smtps" || role == "pickup") return p.uid == smtps_uid_;
    if (role == "smtpc") return p.uid == smtpc_uid_;
    return true;  // cli: each command is checked
}

Server::Access Server::access(const Peer& p) const {
    auto member = [&](const std::optional<gid_t>& g) {
        return g && std::find(p.groups.begin(), p.groups.end(), *g) != p.groups.end();
    };
    if (p.uid == 0 || p.uid == self_ || member(admin_gid_)) return Access::admin;
    return member(stats_gid_) ? Access::read : Access::none;
}

bool Server::listen(std::string& err) {
    using P = smx::ServerConfig::Process;
    if (uid_of(cfg_, P::qmgr) == self_) {
        // We run as our own account: `smx run` was started by root.
        smtps_uid_ = uid_of(cfg_, P::smtps).value_or(self_);
        smtpc_uid_ = uid_of(cfg_, P::smtpc).value_or(self_);
    }
    for (auto [key, name, gid] : {std::tuple{"server.admin_group", &cfg_.server.admin_group, &admin_gid_},
                                  std::tuple{"server.stats_group", &cfg_.server.stats_group, &stats_gid_}}) {
        if (name->empty()) continue;
        const group* gr = ::getgrnam(name->c_str());
        if (!gr) {
            err = std::string(key) + ": no such group '" + *name + "'";
            return false;
        }
        *gid = gr->gr_gid;
    }
    path_ = cfg_.qmgr_socket();
    std::error_code fec;
    std::filesystem::create_directories(cfg_.run_dir_abs(), fec);
    boost::system::error_code ec;
    {
        // A stale socket file from a crash refuses connections; a live
        // QMGR accepts, and must not lose its socket to us.
        stream::socket probe(io_);
        probe.connect(stream::endpoint(path_), ec);
        if (!ec) {
            err = "another qmgr is listening on " + path_;
            return false;
        }
    }
    ::unlink(path_.c_str());
    acceptor_.open(stream(), ec);
    if (!ec) acceptor_.bind(stream::endpoint(path_), ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        err = "listen on " + path_ + ": " + ec.message();
        return false;
    }
    // The children share our primary group; users of admin_group and
    // stats_group need not be in it, so then everyone may connect and
    // access() decides per command.
    ::chmod(path_.c_str(), admin_gid_ || stats_gid_ ? 0666 : 0660);
    asio::co_spawn(io_, accept_loop(), smx::crash_on_exception("qmgr accept"));
    spdlog::info("listening on {}", path_);
    return true;
}

void Server::stop() {
    boost::system::error_code ec;
    acceptor_.close(ec);
    ::unlink(path_.c_str());
}

asio::awaitable<void> Server::accept_loop() {
    smx::AcceptGuard guard("qmgr.sock", "");
    for (;;) {
        auto s = co_await guard.next(acceptor_);
        if (!s) break;
        auto peer = peer_of(s->native_handle());
        if (!peer) {
            spdlog::warn("qmgr.sock: cannot get the peer's credentials: {}", std::strerror(errno));
            continue;
        }
        auto ch = std::make_shared<smx::Channel>(std::move(*s), "peer");
        ch->start();
        asio::co_spawn(io_, session(std::move(ch), std::move(*peer)),
                       smx::crash_on_exception("qmgr peer"));
    }
}

asio::awaitable<void> Server::session(std::shared_ptr<smx::Channel> ch, Peer peer) {
    auto f = co_await read_within(*ch, hello_timeout);
    if (!f) co_return;
    std::string err;
    std::optional<smx::msg::Hello> h;
    if (f->hdr.type == smx::msg::HELLO) h = smx::msg::decode<smx::msg::Hello>(*f, err);
    else err = "expected HELLO, got record type " + std::to_string(f->hdr.type);
    if (!h) co_return co_await refuse(ch, "protocol error: " + err);
    // The role names the peer in the log only once it is known to be clean.
    if (h->role != "smtps" && h->role != "smtpc" && h->role != "cli" && h->role != "pickup")
        co_return co_await refuse(ch, "unknown role");
    ch->set_peer(h->role + "[" + std::to_string(h->pid) + "]");
    if (!may_claim(peer, h->role))
        co_return co_await refuse(ch, "role " + h->role + " not allowed for uid " +
                                          std::to_string(peer.uid));
    if (h->version != smx::msg::protocol_version)
        co_return co_await refuse(ch, "protocol version " + std::to_string(h->version) +
                                           " not supported (qmgr speaks " +
                                           std::to_string(smx::msg::protocol_version) + ")");
    ch->send(smx::msg::encode(smx::msg::HelloAck{0, "smx qmgr"}));
    if (h->role == "smtps" || h->role == "pickup") co_await smtps(ch, h->role == "pickup");
    else if (h->role == "smtpc") co_await smtpc(ch);
    else co_await cli(ch, access(peer));
    ch->close();
}

asio::awaitable<void> Server::smtps(std::shared_ptr<smx::Channel> ch, bool pickup) {
    // smx-pickup is no SMTPS link in `smx stats`.
    const std::optional<std::uint64_t> link =
        pickup ? std::nullopt : std::optional<std::uint64_t>(q_.add_smtps());
    spdlog::info("{}: connected", ch->peer());
    while (auto f = co_await ch->read()) {
        if (f->hdr.type == smx::msg::SMTPS_LOAD) {
            const auto load = small<smx::msg::SmtpsLoad>(*ch, *f, smx::msg::SMTPS_LOAD, "SMTPS_LOAD");
            if (!load) break;
            if (pickup) q_.pickup_load(*load);
            else q_.smtps_load(*link, *load);
            continue;
        }
        if (f->hdr.type == smx::msg::ANVIL_REQ && !pickup) {
            const auto req = small<smx::msg::AnvilRequest>(*ch, *f, smx::msg::ANVIL_REQ, "ANVIL_REQ");
            if (!req) break;
            if (const auto reply = q_.anvil(*link, *req)) ch->send(smx::msg::encode(*reply, f->hdr.req_id));
            continue;
        }
        auto ta = take<smx::msg::TaCommit>(*ch, *f, smx::msg::TA_COMMIT);
        if (!ta) break;
        if (!ta->rec) {
            q_.commit_refused();
            ch->send(smx::msg::encode(
                smx::msg::TaAck{{}, smx::msg::AckStatus::reject, "5.3.4 envelope too large"},
                ta->req_id));
            continue;
        }
        q_.on_commit(std::move(*ta->rec), ta->req_id,
                     [ch](std::string frame) { ch->send(std::move(frame)); },
                     pickup ? Qmgr::From::pickup : Qmgr::From::smtps);
    }
    if (link) q_.remove_smtps(*link);
    spdlog::info("{}: disconnected", ch->peer());
}

asio::awaitable<void> Server::smtpc(std::shared_ptr<smx::Channel> ch) {
    const auto link = q_.add_smtpc([ch](std::string frame) { ch->send(std::move(frame)); });
    spdlog::info("{}: connected", ch->peer());
    while (auto r = co_await next<smx::msg::Result>(*ch, smx::msg::RESULT)) {
        // SMTPC sends a RESULT with req_id = da_id: an oversize one fails
        // only that delivery, whose recipients are tried again later.
        if (!r->rec) q_.on_result(link, smx::msg::Result{r->req_id, {}, {}});
        else q_.on_result(link, *r->rec);
    }
    // What it had in flight goes back to the queues for the next SMTPC.
    q_.remove_smtpc(link);
    spdlog::info("{}: disconnected", ch->peer());
}

asio::awaitable<void> Server::cli(std::shared_ptr<smx::Channel> ch, Access access) {
    while (auto f = co_await read_within(*ch, cli_timeout)) {
        std::string err;
        std::optional<smx::msg::CtlRequest> req;
        if (f->hdr.type != smx::msg::CTL_REQ)
            err = "unexpected record type " + std::to_string(f->hdr.type);
        else if (f->oversize) err = "request too large";
        else req = smx::msg::decode<smx::msg::CtlRequest>(*f, err);
        if (!req) {
            ch->send(smx::msg::encode(smx::msg::CtlReply{1, "protocol error: " + err},
                                     f->hdr.req_id));
            break;
        }
        const Access needed = reads_only(req->command) ? Access::read : Access::admin;
        if (access < needed) {
            const std::string who = needed == Access::read
                                        ? "root, server.admin_group or server.stats_group"
                                        : "root or server.admin_group";
            spdlog::warn("{}: refused {}: needs {}", ch->peer(), req->command, who);
            ch->send(smx::msg::encode(
                smx::msg::CtlReply{1, "permission denied: " + req->command + " needs " + who},
                f->hdr.req_id));
            continue;
        }
        // Answered when ready (DEFEDB work runs on the pool); the CLI waits.
        q_.control(*req, [ch, req_id = f->hdr.req_id](smx::msg::CtlReply r) {
            ch->send(smx::msg::encode(r, req_id));
        });
    }
}

} // namespace smx::qmgr
