#include "smtps/client_limits.hpp"

#include <arpa/inet.h>
#include <spdlog/spdlog.h>

#include <atomic>

namespace smx::smtps {

using smx::msg::AnvilOp;

std::string anvil_key(const std::string& ip, unsigned ipv6_prefix) {
    in6_addr a{};
    if (ipv6_prefix >= 128 || ::inet_pton(AF_INET6, ip.c_str(), &a) != 1) return ip;
    for (unsigned bit = ipv6_prefix; bit < 128; ++bit)
        a.s6_addr[bit / 8] &= static_cast<unsigned char>(~(0x80u >> (bit % 8)));
    char buf[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(AF_INET6, &a, buf, sizeof buf);
    return std::string(buf) + "/" + std::to_string(ipv6_prefix);
}

namespace {

bool any_limit(const smx::Config& cfg) {
    const auto& a = cfg.anvil;
    return cfg.server.max_connections_per_client || a.connection_rate_limit ||
           a.message_rate_limit || a.recipient_rate_limit;
}

// A stuck QMGR would otherwise log this for every session.
void warn_unanswered() {
    static std::atomic<std::int64_t> last{0};
    const std::int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                                 std::chrono::steady_clock::now().time_since_epoch())
                                 .count();
    std::int64_t was = last.load();
    if (now - was < 60 || !last.compare_exchange_strong(was, now)) return;
    spdlog::warn("anvil: no answer from qmgr within {}s; sessions go on without the per-client "
                 "limits (logged once a minute)",
                 anvil_timeout.count());
}

} // namespace

ClientLimits::ClientLimits(QmgrClient& qmgr, const smx::Config& cfg, const std::string& ip,
                           bool trusted, const std::string& client)
    : qmgr_(qmgr), ip_(ip), client_(client), hostname_(cfg.server.hostname),
      counted_(any_limit(cfg) && cfg.anvil.counts(ip, trusted)),
      key_(counted_ ? anvil_key(ip, cfg.anvil.ipv6_prefix) : std::string()),
      conn_limit_(cfg.server.max_connections_per_client),
      conn_rate_limit_(cfg.anvil.connection_rate_limit), mail_limit_(cfg.anvil.message_rate_limit),
      rcpt_limit_(cfg.anvil.recipient_rate_limit) {}

asio::awaitable<std::optional<smx::msg::AnvilReply>> ClientLimits::ask(AnvilOp op) {
    smx::msg::AnvilRequest r{op, key_, mail_limit_, rcpt_limit_};
    auto reply = co_await qmgr_.anvil(r, anvil_timeout);
    if (!reply && qmgr_.connected()) warn_unanswered();
    co_return reply;
}

void ClientLimits::tell(AnvilOp op) { qmgr_.tell(smx::msg::AnvilRequest{op, key_, 0, 0}); }

ClientLimits::Hit ClientLimits::hit(smx::Rejection why, std::string_view what, std::uint32_t n,
                                    std::string reply) const {
    spdlog::warn("{} limit exceeded: {} from {} for service smtp", what, n, client_);
    return {why, std::move(reply)};
}

asio::awaitable<std::optional<ClientLimits::Hit>> ClientLimits::connect() {
    if (!counted_ || (!conn_limit_ && !conn_rate_limit_)) co_return std::nullopt;
    connect_sent_ = true;
    const auto r = co_await ask(AnvilOp::connect);
    if (!r) co_return std::nullopt;
    const std::string reply =
        "421 4.7.0 " + hostname_ + " Error: too many connections from " + ip_;
    if (conn_limit_ && r->connections > conn_limit_)
        co_return hit(smx::Rejection::too_many_connections, "Connection concurrency",
                      r->connections, reply);
    if (conn_rate_limit_ && r->rate > conn_rate_limit_)
        co_return hit(smx::Rejection::connection_rate, "Connection rate", r->rate, reply);
    co_return std::nullopt;
}

asio::awaitable<std::optional<ClientLimits::Hit>> ClientLimits::mail() {
    const auto r = co_await ask(AnvilOp::mail);
    if (!r) co_return std::nullopt;
    if (mail_limit_ && r->rate > mail_limit_)
        co_return hit(smx::Rejection::message_rate, "Message delivery request rate", r->rate,
                      "450 4.7.1 Error: too much mail from " + ip_);
    grant_ = r->rcpt_granted ? Grant::granted : Grant::none;
    co_return std::nullopt;
}

asio::awaitable<void> ClientLimits::ask_rcpt() {
    const auto r = co_await ask(AnvilOp::rcpt);
    if (!r) {
        grant_ = Grant::unchecked;
    } else if (r->rate > rcpt_limit_) {
        grant_ = Grant::refused;
        refused_rate_ = r->rate;
    } else {
        grant_ = Grant::granted;
    }
}

std::optional<ClientLimits::Hit> ClientLimits::take_rcpt() {
    const Grant g = grant_;
    grant_ = Grant::none;
    if (g != Grant::refused) return std::nullopt;
    return hit(smx::Rejection::recipient_rate, "Recipient address rate", refused_rate_,
               "450 4.7.1 Error: too many recipients from " + ip_);
}

void ClientLimits::transaction_ended() {
    // A refused one too: the count is of RCPTs that reached the check.
    if (grant_ == Grant::granted || grant_ == Grant::refused) tell(AnvilOp::unused_rcpt);
    grant_ = Grant::none;
}

void ClientLimits::session_ended() {
    transaction_ended();
    if (connect_sent_) tell(AnvilOp::disconnect);
}

} // namespace smx::smtps
