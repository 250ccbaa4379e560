#include "server.hpp"

#include "session.hpp"
#include "accept.hpp"
#include "panic.hpp"
#include "smtp_io.hpp"

#include <spdlog/spdlog.h>

namespace smtps {

std::string client_ip(const tcp::endpoint& ep) {
    auto a = ep.address();
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
    return a.to_string();
}

Settings::Settings(std::shared_ptr<const sm::Config> cfg, std::shared_ptr<asio::ssl::context> tls)
    : config(std::move(cfg)), policy(config->server), tls(std::move(tls)) {
    const auto& s = config->server;
    const std::string head = "250-" + s.hostname + "\r\n250-PIPELINING\r\n250-SIZE " +
                             std::to_string(s.max_message_size) +
                             "\r\n250-8BITMIME\r\n250-CHUNKING\r\n250-SMTPUTF8\r\n250-DSN\r\n";
    ehlo_reply_ = head + "250 ENHANCEDSTATUSCODES\r\n";
    ehlo_reply_tls_ = head + "250-STARTTLS\r\n250 ENHANCEDSTATUSCODES\r\n";
}

Server::Server(asio::any_io_executor ex, const sm::Config& cfg, QmgrClient& qmgr,
               CdbStore& cdb, asio::ssl::context* tls)
    // Not owned: the aliasing constructor with no owner.
    : ex_(std::move(ex)),
      settings_(std::make_shared<const Settings>(
          std::shared_ptr<const sm::Config>(std::shared_ptr<void>(), &cfg),
          std::shared_ptr<asio::ssl::context>(std::shared_ptr<void>(), tls))),
      qmgr_(qmgr), cdb_(cdb) {}

void Server::reload(std::shared_ptr<const sm::Config> cfg,
                    std::shared_ptr<asio::ssl::context> tls) {
    settings_ = std::make_shared<const Settings>(std::move(cfg), std::move(tls));
}

void Server::listen(tcp::acceptor acceptor) {
    acceptors_.push_back(std::move(acceptor));
    asio::co_spawn(ex_, accept_loop(acceptors_.back()), sm::crash_on_exception("smtps accept"));
}

void Server::stop_accepting() {
    boost::system::error_code ec;
    for (auto& a : acceptors_) a.close(ec);
}

std::string Server::admit(const std::string& ip, bool trusted) {
    const auto& s = settings_->server();
    if (counts_->sessions >= s.max_connections)
        return "421 4.7.0 " + s.hostname + " Error: too many connections\r\n";
    if (!trusted) {
        unsigned& n = counts_->per_client[ip];
        if (n >= s.max_connections_per_client) {
            if (n == 0) counts_->per_client.erase(ip);
            return "421 4.7.0 " + s.hostname + " Error: too many connections from " + ip +
                   "\r\n";
        }
        ++n;
    }
    ++counts_->sessions;
    return {};
}

void Server::Counts::release(const std::string& ip, bool counted_per_client) {
    --sessions;
    if (!counted_per_client) return;
    auto it = per_client.find(ip);
    if (it != per_client.end() && --it->second == 0) per_client.erase(it);
}

asio::awaitable<void> Server::accept_loop(tcp::acceptor& acceptor) {
    // server.hostname needs a restart: this reply is made once.
    sm::AcceptGuard guard("smtp", "421 4.3.2 " + settings_->server().hostname +
                                      " Error: too many open files, try again later\r\n");
    for (;;) {
        auto accepted = co_await guard.next(acceptor);
        if (!accepted) co_return;
        tcp::socket sock = std::move(*accepted);
        boost::system::error_code pec;
        const auto peer = sock.remote_endpoint(pec);
        if (pec) continue;  // already gone
        sock.set_option(tcp::no_delay(true), pec);
        std::string ip = client_ip(peer);
        const bool trusted = settings_->policy.trusted_client(ip);
        std::string refusal = admit(ip, trusted);
        if (!refusal.empty()) {
            spdlog::warn("connect from unknown[{}]: {}", ip,
                         std::string_view(refusal).substr(0, refusal.size() - 2));
            asio::co_spawn(ex_, [s = std::move(sock), refusal = std::move(refusal),
                                 t = settings_->server().command_timeout]() mutable
                                    -> asio::awaitable<void> {
                co_await sm::smtp::write_all(s, refusal, t);
            }, sm::crash_on_exception("smtps refusal"));
            continue;
        }
        asio::co_spawn(ex_, [this, s = std::move(sock), ip = std::move(ip),
                             trusted]() mutable -> asio::awaitable<void> {
            // Releases the counts however the session ends.
            struct Slot {
                std::shared_ptr<Counts> counts;
                const std::string& ip;
                bool per_client;
                ~Slot() { counts->release(ip, per_client); }
            } slot{counts_, ip, !trusted};
            co_await run_session(*this, std::move(s), ip, trusted);
        }, sm::crash_on_exception("smtps session"));
    }
}

} // namespace smtps
