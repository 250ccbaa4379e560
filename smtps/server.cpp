#include "smtps/server.hpp"

#include "libsm/accept.hpp"
#include "libsm/await.hpp"
#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"
#include "smtps/session.hpp"

#include <spdlog/spdlog.h>

#include <utility>

namespace smx::smtps {

std::string client_ip(const tcp::endpoint& ep) {
    auto a = ep.address();
    if (a.is_v6() && a.to_v6().is_v4_mapped())
        a = asio::ip::make_address_v4(asio::ip::v4_mapped, a.to_v6());
    return a.to_string();
}

Settings::Settings(std::shared_ptr<const smx::Config> cfg, std::shared_ptr<asio::ssl::context> tls)
    : config(std::move(cfg)), policy(config->server), tables(config->policy), rewrite(config->rewrite),
      tls(std::move(tls)) {
    const auto& s = config->server;
    const std::string head = "250-" + s.hostname + "\r\n250-PIPELINING\r\n250-SIZE " +
                             std::to_string(s.max_message_size) +
                             "\r\n250-8BITMIME\r\n250-CHUNKING\r\n250-SMTPUTF8\r\n250-DSN\r\n";
    ehlo_reply_ = head + "250 ENHANCEDSTATUSCODES\r\n";
    ehlo_reply_tls_ = head + "250-STARTTLS\r\n250 ENHANCEDSTATUSCODES\r\n";
}

Shared::Shared(const smx::Config& cfg, asio::ssl::context* tls)
    // Not owned: the aliasing constructor with no owner.
    : settings_(std::make_shared<const Settings>(
          std::shared_ptr<const smx::Config>(std::shared_ptr<void>(), &cfg),
          std::shared_ptr<asio::ssl::context>(std::shared_ptr<void>(), tls))) {}

std::shared_ptr<const Settings> Shared::settings() const {
    std::lock_guard lk(mu_);
    return settings_;
}

void Shared::reload(std::shared_ptr<const smx::Config> cfg,
                    std::shared_ptr<asio::ssl::context> tls) {
    auto next = std::make_shared<const Settings>(std::move(cfg), std::move(tls));
    std::lock_guard lk(mu_);
    settings_ = std::move(next);
}

void Shared::limit_process(unsigned own_max, smx::SessionCounts* counts, unsigned slot) {
    std::lock_guard lk(mu_);
    own_max_ = own_max;
    counts_ = counts;
    slot_ = slot;
    if (counts_) counts_->set(slot_, sessions_);
}

std::string Shared::admit() {
    std::lock_guard lk(mu_);
    const auto& s = settings_->server();
    const std::uint64_t all = sessions_ + (counts_ ? counts_->others(slot_) : 0);
    if (sessions_ >= own_max_ || all >= s.max_connections)
        return "421 4.7.0 " + s.hostname + " Error: too many connections\r\n";
    ++sessions_;
    if (counts_) counts_->set(slot_, sessions_);
    return {};
}

void Shared::release() {
    std::lock_guard lk(mu_);
    --sessions_;
    if (counts_) counts_->set(slot_, sessions_);
}

std::size_t Shared::sessions() const {
    std::lock_guard lk(mu_);
    return sessions_;
}

Server::Server(asio::any_io_executor ex, std::shared_ptr<Shared> shared, QmgrClient& qmgr,
               ContentStore& store, unsigned loops)
    : ex_(std::move(ex)), shared_(std::move(shared)), qmgr_(qmgr), store_(store),
      segment_(store.segment_for().count() > 0
                   ? std::make_shared<SegmentWriter>(ex_, store.content_dir(), store.sync_names(),
                                                     store.segment_for())
                   : nullptr),
      loops_(loops), client_checks_(ex_, *shared_->settings()->config) {
    if (loops_ == 0) smx::panic("smtps: a Server of 0 event loops");
}

void Server::listen(tcp::acceptor acceptor) {
    // Linux gives an accepted socket the listener's TCP_NODELAY: set once
    // here, not once per client (replies are whole writes already, but
    // pipelined ones must not wait for an ACK).
    boost::system::error_code ec;
    acceptor.set_option(tcp::no_delay(true), ec);
    if (ec) spdlog::warn("cannot set TCP_NODELAY on a listener: {}", ec.message());
    acceptors_.push_back(std::move(acceptor));
    asio::co_spawn(ex_, accept_loop(acceptors_.back()), smx::crash_on_exception("smtps accept"));
}

void Server::stop_accepting() {
    boost::system::error_code ec;
    for (auto& a : acceptors_) a.close(ec);
}

asio::awaitable<void> Server::accept_loop(tcp::acceptor& acceptor) {
    // server.hostname needs a restart: this reply is made once.
    smx::AcceptGuard guard("smtp", "421 4.3.2 " + settings()->server().hostname +
                                      " Error: too many open files, try again later\r\n");
    for (;;) {
        tcp::endpoint peer;
        auto accepted = co_await guard.next(acceptor, &peer);
        if (!accepted) co_return;
        ++accepted_;
        tcp::socket sock = std::move(*accepted);
        std::string ip = client_ip(peer);
        const auto settings = shared_->settings();
        const bool trusted = settings->policy.trusted_client(ip);
        std::string refusal = shared_->admit();
        if (!refusal.empty()) {
            rejections_->add(smx::Rejection::too_many_connections, 421);
            spdlog::info("NOQUEUE: reject: CONNECT from unknown[{}]: {}; proto=SMTP", ip,
                         std::string_view(refusal).substr(0, refusal.size() - 2));
            asio::co_spawn(ex_, [s = std::move(sock), refusal = std::move(refusal),
                                 t = settings->server().command_timeout]() mutable
                                    -> asio::awaitable<void> {
                co_await smx::smtp::write_all(s, refusal, t);
            }, smx::crash_on_exception("smtps refusal"));
            continue;
        }
        asio::co_spawn(ex_, [this, s = std::move(sock), ip = std::move(ip),
                             trusted]() mutable -> asio::awaitable<void> {
            // Releases the counts however the session ends.
            struct Slot {
                std::shared_ptr<Shared> shared;
                std::shared_ptr<std::size_t> loop_sessions;
                ~Slot() {
                    shared->release();
                    --*loop_sessions;
                }
            } slot{shared_, sessions_};
            ++*sessions_;
            co_await run_session(*this, std::move(s), ip, trusted);
        }, smx::crash_on_exception("smtps session"));
    }
}

void Server::start_load_reports(unsigned loop) {
    asio::co_spawn(ex_, report_load(loop), smx::crash_on_exception("smtps load report"));
}

asio::awaitable<void> Server::report_load(unsigned loop) {
    std::optional<smx::msg::SmtpsLoad> sent;
    asio::steady_timer timer(ex_);
    while (qmgr_.connected()) {
        smx::msg::SmtpsLoad now{loop, *sessions_, gate_->open(), gate_->waiting(),
                               rejections_->take(), std::exchange(*milter_failures_, {})};
        const bool counts =
            !now.rejected.empty() || now.milter_failures != smx::msg::MilterFailureCounts{};
        if (now != sent || counts) {
            qmgr_.report(now);
            now.rejected.clear();
            now.milter_failures = {};
            sent = now;
        }
        timer.expires_after(std::chrono::seconds(1));
        co_await timer.async_wait(smx::await_tuple);
    }
}

} // namespace smx::smtps
