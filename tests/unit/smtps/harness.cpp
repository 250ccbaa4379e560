#include "tests/unit/smtps/harness.hpp"

#include "libsm/channel.hpp"
#include "libsm/content_file.hpp"
#include "libsm/panic.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace smtps_test {

Harness::Harness(const std::function<void(smx::Config&)>& tweak) {
    std::random_device rd;
    dir_ = std::filesystem::temp_directory_path() / ("smtps-test-" + std::to_string(rd()));
    std::filesystem::create_directories(dir_ / "run");
    cfg_ = smx::load_config("");
    cfg_.queue.spool_dir = (dir_ / "spool").string();
    cfg_.queue.run_dir = (dir_ / "run").string();
    cfg_.server.hostname = "mx.test";
    // Sessions do not depend on this machine's hosts file or name servers.
    cfg_.policy.client_name_lookup = false;
    if (tweak) tweak(cfg_);
    anvil_ = std::make_unique<smx::qmgr::Anvil>(cfg_.anvil.rate_time_unit, cfg_.anvil.max_clients);
    store_ = std::make_unique<smx::smtps::ContentStore>(
        cfg_.content_dir_abs(), cfg_.queue.cdb_hashed, pool_, 0,
        cfg_.queue.content_sync == smx::QueueConfig::ContentSync::file, smx::content::sync_names(cfg_));
    qmgr_acceptor_ = std::make_unique<asio::local::stream_protocol::acceptor>(
        io_, asio::local::stream_protocol::endpoint(cfg_.qmgr_socket()));
    std::promise<void> ready;
    auto fut = ready.get_future();
    asio::co_spawn(io_, fake_qmgr(), smx::crash_on_exception("harness: fake QMGR"));
    asio::co_spawn(io_, start(ready), smx::crash_on_exception("harness: server"));
    thread_ = std::thread([this] { io_.run(); });
    if (fut.wait_for(std::chrono::seconds(5)) != std::future_status::ready)
        throw std::runtime_error("server did not start");
}

Harness::~Harness() {
    io_.stop();
    thread_.join();
    pool_.join();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
}

asio::awaitable<void> Harness::start(std::promise<void>& ready) {
    std::string err;
    auto ch = co_await smx::connect_qmgr(cfg_.qmgr_socket(), "smtps", err);
    if (!ch) throw std::runtime_error(err);
    qmgr_ = std::make_unique<smx::smtps::QmgrClient>(io_.get_executor(), ch,
                                                std::chrono::seconds(2),
                                                [this] { qmgr_lost = true; });
    qmgr_->start();
    server_ = std::make_unique<smx::smtps::Server>(
        io_.get_executor(), std::make_shared<smx::smtps::Shared>(cfg_, nullptr), *qmgr_, *store_, 1);
    tcp::acceptor a(io_, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0));
    port_ = a.local_endpoint().port();
    server_->listen(std::move(a));
    ready.set_value();
}

asio::awaitable<void> Harness::fake_qmgr() {
    auto [ec, s] = co_await qmgr_acceptor_->async_accept(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
    auto ch = std::make_shared<smx::Channel>(std::move(s), "smtps");
    ch->start();
    auto hello = co_await ch->read();
    if (!hello) co_return;
    ch->send(smx::msg::encode(smx::msg::HelloAck{0, "ok"}));
    while (auto f = co_await ch->read()) {
        std::string err;
        if (f->hdr.type == smx::msg::ANVIL_REQ) {
            if (!answer_anvil(*ch, *f)) break;
            continue;
        }
        auto ta = smx::msg::decode<smx::msg::TaCommit>(*f, err);
        if (!ta) break;
        {
            std::lock_guard lk(mu_);
            commits_.push_back(*ta);
        }
        smx::msg::TaAck ack;
        ack.ta_id = ta->ta_id;
        switch (mode.load()) {
        case QmgrMode::ok: break;
        case QmgrMode::tempfail:
            ack.status = smx::msg::AckStatus::tempfail;
            ack.text = "4.3.2 Queue full";
            break;
        case QmgrMode::reject:
            ack.status = smx::msg::AckStatus::reject;
            ack.text = "Go away";
            break;
        case QmgrMode::silent: continue;
        case QmgrMode::hang_up: ch->close(); co_return;
        }
        ch->send(smx::msg::encode(ack, f->hdr.req_id));
    }
}

bool Harness::answer_anvil(smx::Channel& ch, const smx::rec::Frame& f) {
    std::string err;
    const auto req = smx::msg::decode<smx::msg::AnvilRequest>(f, err);
    if (!req) return false;
    if (const auto r = anvil_->handle(1, *req, std::chrono::steady_clock::now()))
        ch.send(smx::msg::encode(*r, f.hdr.req_id));
    return true;
}

std::vector<std::string> Harness::content_files() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(cfg_.content_dir_abs(), ec);
         !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec))
        if (it->is_regular_file()) out.push_back(it->path().string());
    return out;
}

std::vector<smx::msg::TaCommit> Harness::commits() {
    std::lock_guard lk(mu_);
    return commits_;
}

Client::Client(std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0)
        throw std::runtime_error("connect failed");
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

Client::~Client() { ::close(fd_); }

void Client::send(const std::string& s) {
    std::size_t off = 0;
    while (off < s.size()) {
        const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
        if (n <= 0) return;  // server closed; the test sees it in reply()
        off += static_cast<std::size_t>(n);
    }
}

std::string Client::line() {
    for (;;) {
        const auto p = buf_.find("\r\n");
        if (p != std::string::npos) {
            std::string l = buf_.substr(0, p);
            buf_.erase(0, p + 2);
            return l;
        }
        char tmp[4096];
        const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
        if (n <= 0) return {};
        buf_.append(tmp, static_cast<std::size_t>(n));
    }
}

std::string Client::reply() {
    std::string out;
    for (;;) {
        const std::string l = line();
        if (l.empty()) return out;
        if (!out.empty()) out += "\n";
        out += l;
        if (l.size() < 4 || l[3] != '-') return out;
    }
}

std::string Client::cmd(const std::string& l) {
    send(l + "\r\n");
    return reply();
}

bool Client::closed() {
    char c;
    return buf_.empty() && ::recv(fd_, &c, 1, 0) == 0;
}

std::string Client::drain(int ms) {
    ::usleep(static_cast<useconds_t>(ms) * 1000);
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, MSG_DONTWAIT);
    std::string out = buf_;
    buf_.clear();
    if (n > 0) out.append(tmp, static_cast<std::size_t>(n));
    return out;
}

std::string send_message(Client& c, const std::string& from, const std::vector<std::string>& to,
                         const std::string& data_with_dot) {
    if (c.cmd("MAIL FROM:<" + from + ">").rfind("250", 0) != 0) return "MAIL failed";
    for (const auto& t : to)
        if (c.cmd("RCPT TO:<" + t + ">").rfind("250", 0) != 0) return "RCPT failed";
    if (c.cmd("DATA").rfind("354", 0) != 0) return "DATA failed";
    c.send(data_with_dot);
    return c.reply();
}

std::string read_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::string queued_id(const std::string& reply) {
    const auto p = reply.find("queued as ");
    return p == std::string::npos ? std::string{} : reply.substr(p + 10);
}

} // namespace smtps_test
