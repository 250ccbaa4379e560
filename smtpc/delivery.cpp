#include "smtpc/delivery.hpp"

#include "libsm/content_file.hpp"
#include "libsm/domain.hpp"
#include "libsm/ids.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

namespace smx::smtpc {
namespace {

std::string rcpt_domain(const smx::msg::Deliver& d) { return smx::domain_of(d.rcpts.front().addr); }

} // namespace

smx::msg::Result fail_all(const smx::msg::Deliver& d, const Failure& f) {
    smx::msg::Result r;
    r.da_id = d.da_id;
    r.rcpts.reserve(d.rcpts.size());
    for (const auto& rc : d.rcpts) r.rcpts.push_back({rc.idx, f.code, f.enhanced, f.text});
    return r;
}

std::string destination_key(const smx::msg::Deliver& d, smx::ClientTls tls) {
    std::string key;
    bool mx = false;
    for (const auto& nh : d.nexthops) {
        key += nh;
        key += ' ';
        mx = mx || nh == "mx";
    }
    if (mx && !d.rcpts.empty()) key += rcpt_domain(d);
    key += " tls=" + std::to_string(static_cast<int>(tls));
    return key;
}

void fit_result(smx::msg::Result& r) {
    // Field overheads are small; leave a generous margin for them.
    constexpr std::size_t budget = smx::rec::max_body / 2;
    std::size_t total = r.relay.size();
    for (const auto& x : r.rcpts) total += x.text.size() + x.enhanced.size() + 64;
    if (total <= budget || r.rcpts.empty()) return;
    const std::size_t share = budget / r.rcpts.size();
    const std::size_t each = std::max<std::size_t>(32, share > 64 ? share - 64 : 0);
    for (auto& x : r.rcpts)
        if (x.text.size() > each) x.text.resize(each);
}

Deliverer::Deliverer(const smx::Config& cfg, Resolver& dns, ConnectionCache& cache,
                     asio::ssl::context* tls, const smx::CredentialMap* creds, TlsSessions* resume)
    // Not owned: the aliasing constructor with no owner.
    : settings_(std::make_shared<const Settings>(
          Settings{std::shared_ptr<const smx::Config>(std::shared_ptr<void>(), &cfg),
                   std::shared_ptr<asio::ssl::context>(std::shared_ptr<void>(), tls),
                   std::shared_ptr<const smx::CredentialMap>(std::shared_ptr<void>(), creds),
                   std::shared_ptr<TlsSessions>(std::shared_ptr<void>(), resume)})),
      store_(smx::content::store_for(cfg)), segments_(store_), dns_(dns), cache_(cache) {}

void Deliverer::reload(std::shared_ptr<const smx::Config> cfg,
                       std::shared_ptr<asio::ssl::context> tls,
                       std::shared_ptr<const smx::CredentialMap> creds,
                       std::shared_ptr<TlsSessions> resume) {
    settings_ = std::make_shared<const Settings>(
        Settings{std::move(cfg), std::move(tls), std::move(creds), std::move(resume)});
    // Idle sessions hold the old [client] settings and TLS context.
    cache_.reload(settings_, settings_->cfg->client);
}

void Deliverer::done_with(const Settings& st, const std::string& key,
                          std::shared_ptr<Session> s) {
    if (&st == settings_.get()) cache_.put(key, std::move(s));
    else s->close();
}

asio::awaitable<smx::msg::Result> Deliverer::deliver(const smx::msg::Deliver& d) {
    using namespace asio::experimental::awaitable_operators;
    // Keeps this delivery's config, and its sessions', alive to the end.
    const std::shared_ptr<const Settings> st = settings_;
    const smx::Config& cfg = *st->cfg;
    smx::msg::Result r;
    r.da_id = d.da_id;
    if (d.rcpts.empty()) co_return r;
    if (!idle_close_) idle_close_.emplace(co_await asio::this_coro::executor);
    struct Running {
        Deliverer& d;
        explicit Running(Deliverer& x) : d(x) { ++d.running_; }
        ~Running() {
            if (--d.running_ > 0) return;
            d.idle_close_->expires_after(std::chrono::seconds(1));  // cancels the last wait
            d.idle_close_->async_wait([&d = d](boost::system::error_code ec) {
                if (!ec && d.running_ == 0) d.segments_.close_before(UINT64_MAX);
            });
        }
    } running(*this);
    const auto keep_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(cfg.queue.segment_age).count());
    const std::uint64_t now = smx::now_us();
    segments_.close_before(now > keep_us ? now - keep_us : 0);
    MessageFile file;
    if (auto err = file.open(store_, d.content_id, d.ta_id, d.size, &segments_); !err.empty()) {
        spdlog::warn("{}: {}", d.ta_id, err);
        r = fail_all(d, {451, "4.3.0", err});
        if (file.unusable()) r.content_error = err;
        co_return r;
    }
    r.rcpts.reserve(d.rcpts.size());
    for (const auto& rc : d.rcpts) r.rcpts.push_back({rc.idx, 0, {}, {}});

    // The attempt is cancelled at the deadline (its connection is closed,
    // not cached); recipients without a verdict by then are retried.
    asio::steady_timer limit(co_await asio::this_coro::executor, cfg.client.delivery_timeout);
    const auto done = co_await (attempt(*st, d, file, r) ||
                                limit.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (done.index() == 1) {
        const Failure late{451, "4.4.2",
                           "delivery timed out after " +
                               std::to_string(cfg.client.delivery_timeout.count()) + " s" +
                               (r.relay.empty() ? std::string() : " talking to " + r.relay)};
        spdlog::info("{}: {}", d.ta_id, late.text);
        for (auto& x : r.rcpts)
            if (x.code == 0) x = {x.idx, late.code, late.enhanced, late.text};
    }
    fit_result(r);
    co_return r;
}

const smx::Credentials* Deliverer::credentials_for(const Settings& st, const std::string& nexthop) {
    if (!st.creds || st.creds->empty() || nexthop == "mx") return nullptr;
    smx::HostPort hp;
    try {
        hp = smx::parse_hostport("nexthop", nexthop, st.cfg->client.smtp_port);
    } catch (const smx::ConfigError&) {
        return nullptr;  // Resolver::targets reports the bad next hop
    }
    hp.host = smx::lower(hp.host);
    const auto it = st.creds->find(hp.str());
    return it == st.creds->end() ? nullptr : &it->second;
}

asio::awaitable<void> Deliverer::attempt(const Settings& st, const smx::msg::Deliver& d,
                                         const MessageFile& file, smx::msg::Result& r) {
    const smx::Config& cfg = *st.cfg;
    const smx::ClientTls tls =
        d.rcpts.empty() ? cfg.client.tls_security_level : cfg.tls_for(rcpt_domain(d));
    const std::string key = destination_key(d, tls);
    // A cached session first; one that the server closed while it sat idle
    // says retry, and the next one (or a new connection) is tried.
    while (auto s = cache_.take(key)) {
        r.relay = s->relay();
        r.peer_dsn = s->dsn_offered();
        auto outcome = co_await s->transaction(d, file, r.rcpts);
        if (outcome == Session::Outcome::retry) continue;
        spdlog::debug("{}: sent over cached connection to {}", d.ta_id, s->relay());
        done_with(st, key, std::move(s));
        co_return;
    }
    r.relay.clear();
    r.peer_dsn = false;

    // The log's delays=c: DNS, connect, greeting, EHLO, TLS and AUTH (all
    // of the attempt when no host took the mail).
    const auto setup_start = std::chrono::steady_clock::now();
    const auto set_setup = [&] {
        using std::chrono::microseconds;
        const auto took = std::chrono::steady_clock::now() - setup_start;
        r.setup_us = static_cast<std::uint64_t>(
            std::chrono::duration_cast<microseconds>(took).count());
    };
    const std::string domain = rcpt_domain(d);
    std::optional<Failure> last;  // what the recipients get if no host takes them
    auto ex = co_await asio::this_coro::executor;
    for (const auto& nh : d.nexthops) {
        Targets t = co_await dns_.targets(nh, domain);
        if (t.list.empty()) {
            spdlog::info("{}: {}", d.ta_id, t.err.text);
            keep_failure(last, std::move(t.err));
            continue;
        }
        // A next hop with credentials gets them only over TLS: it needs
        // TLS as encrypt does, or its recipients wait.
        const smx::Credentials* auth = credentials_for(st, nh);
        const smx::ClientTls level = auth ? std::max(tls, smx::ClientTls::encrypt) : tls;
        for (const auto& target : t.list) {
            auto s = std::make_shared<Session>(ex, cfg.client, st.tls.get(), st.resume.get());
            auto err = co_await s->open(target, level, auth);
            if (err && s->tls_fallback()) {
                s = std::make_shared<Session>(ex, cfg.client, st.tls.get(), st.resume.get());
                err = co_await s->open(target, smx::ClientTls::none);
            }
            if (err) {
                spdlog::info("{}: {}", d.ta_id, err->text);
                keep_failure(last, std::move(*err));
                continue;
            }
            r.relay = s->relay();
            r.peer_dsn = s->dsn_offered();
            set_setup();
            co_await s->transaction(d, file, r.rcpts);  // a new session never says retry
            done_with(st, key, std::move(s));
            co_return;
        }
    }
    const Failure f = last.value_or(Failure{451, "4.4.3", "no next hop for domain " + domain});
    for (auto& x : r.rcpts) x = {x.idx, f.code, f.enhanced, f.text};
    set_setup();
}

} // namespace smx::smtpc
