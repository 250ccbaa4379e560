#include "smtps/client_check.hpp"

#include "libsm/await.hpp"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <memory>
#include <optional>

namespace smx::smtps {
namespace {

namespace asio = boost::asio;
using smx::dns::Clock;
using smx::dns::Kind;

// PTR names tried for a confirmation (a client may publish many).
constexpr std::size_t max_ptr_names = 4;
// What a PREGREET line shows of what the client sent, of what is read.
constexpr std::size_t pregreet_shown = 100, pregreet_read = 4096;

std::string seconds(Clock::duration d) {
    return fmt::format("{:.2f}", std::chrono::duration<double>(d).count());
}

// Client bytes for a log line: printable ASCII as is, the rest escaped.
std::string printable(std::string_view s) {
    std::string out;
    for (unsigned char c : s) {
        if (c >= ' ' && c < 127 && c != '\\') out += static_cast<char>(c);
        else if (c == '\r') out += "\\r";
        else if (c == '\n') out += "\\n";
        else out += fmt::format("\\x{:02x}", c);
    }
    return out;
}

} // namespace

ClientChecks::ClientChecks(asio::any_io_executor ex, const smx::Config& cfg) : dns_(std::move(ex)) {
    if (!cfg.client.dns_servers.empty() && !dns_.set_servers(cfg.client.dns_servers_csv()))
        spdlog::error("client checks: cannot use client.dns_servers; using /etc/resolv.conf");
}

asio::awaitable<ClientChecks::Name> ClientChecks::name_of(const std::string& ip,
                                                          smx::dns::Resolver::Lookup ptr,
                                                          Clock::time_point deadline) {
    Name n;
    const smx::dns::Answer names = co_await dns_.wait(std::move(ptr), deadline);
    if (!names.definite()) {
        n.temporary = true;
        spdlog::warn("hostname lookup of {}: {}; the client is unknown", ip,
                     ares_strerror(names.status));
        co_return n;
    }
    if (names.status != ARES_SUCCESS) co_return n;  // no PTR: unknown, for good
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(ip, ec);
    // The forward lookups of the names run at the same time.
    std::vector<smx::dns::Resolver::Lookup> forward;
    const std::size_t tried = std::min(names.names.size(), max_ptr_names);
    for (std::size_t i = 0; i < tried; ++i) forward.push_back(dns_.start(Kind::addr, names.names[i]));
    for (std::size_t i = 0; i < tried; ++i) {
        const smx::dns::Answer a = co_await dns_.wait(std::move(forward[i]), deadline);
        if (std::find(a.addrs.begin(), a.addrs.end(), addr) != a.addrs.end()) {
            n.name = names.names[i];
            n.temporary = false;
            co_return n;
        }
        // As postfix: the name does not lead back to the client.
        if (a.definite())
            spdlog::warn("hostname {} does not resolve to address {}", names.names[i], ip);
        else
            spdlog::warn("hostname {} does not resolve to address {}: {}", names.names[i], ip,
                         ares_strerror(a.status));
        n.temporary = n.temporary || !a.definite();
    }
    co_return n;
}

asio::awaitable<ClientVerdict> ClientChecks::check(const smx::Config& cfg,
                                                   asio::ip::tcp::socket& sock,
                                                   const std::string& ip, bool trusted) {
    ClientVerdict v;
    const auto t0 = Clock::now();
    boost::system::error_code ec;
    const auto peer = sock.remote_endpoint(ec);
    const std::string where = "[" + ip + "]:" + std::to_string(ec ? 0 : peer.port());
    const smx::DnsblConfig& bl = cfg.dnsbl;
    const bool screened = !trusted;

    // When the client first sent something (pregreet_wait): a handler of
    // its own, as it may outlive this coroutine's wait.
    auto talked = std::make_shared<std::optional<Clock::time_point>>();
    const bool pregreet = screened && bl.pregreet_wait.count() > 0;
    if (pregreet)
        sock.async_wait(asio::socket_base::wait_read, [talked](boost::system::error_code e) {
            if (!e) *talked = Clock::now();
        });

    // Every lookup starts now; they are waited for in turn.
    std::vector<std::pair<const smx::DnsblSite*, smx::dns::Resolver::Lookup>> lists;
    std::vector<std::string> queried;
    if (screened) {
        for (const auto& site : bl.sites) {
            std::string q = site.query_name(ip);
            if (q.empty()) continue;
            lists.emplace_back(&site, dns_.start(Kind::a, q));
            queried.push_back(std::move(q));
        }
    }
    std::optional<smx::dns::Resolver::Lookup> ptr;
    if (cfg.policy.client_name_lookup) ptr = dns_.start(Kind::ptr, ip);

    int score = 0;
    const smx::DnsblSite* worst = nullptr;  // the listing of the largest weight
    for (std::size_t i = 0; i < lists.size(); ++i) {
        // Not a structured binding: clang 14 (the fuzz build) cannot capture one.
        const smx::DnsblSite* site = lists[i].first;
        const smx::dns::Answer a = co_await dns_.wait(std::move(lists[i].second), t0 + bl.timeout);
        if (!a.definite()) {
            spdlog::warn("DNSBL lookup of {}: {}; taken as not listed", queried[i],
                         a.status == ARES_ETIMEOUT ? "no answer within " + seconds(bl.timeout) + "s"
                                                   : std::string(ares_strerror(a.status)));
            continue;
        }
        const bool listed = std::any_of(a.addrs.begin(), a.addrs.end(), [&](const auto& x) {
            return x.is_v4() && site->matches(x.to_v4().to_uint());
        });
        if (!listed) continue;
        score += site->weight;
        if (!worst || site->weight > worst->weight) worst = site;
    }
    if (score != 0) spdlog::info("DNSBL rank {} for {}", score, where);
    const bool allowed = screened && !lists.empty() && score <= bl.whitelist_threshold;

    Name name;
    if (ptr) name = co_await name_of(ip, std::move(*ptr), t0 + cfg.policy.client_name_timeout);
    v.name = name.name;

    if (pregreet) {
        // The greeting waits out pregreet_wait, whatever the lookups took.
        asio::steady_timer t(sock.get_executor(), t0 + bl.pregreet_wait);
        co_await t.async_wait(smx::await_tuple);
        sock.cancel(ec);  // the read watch, if nothing came
        if (*talked && !allowed) {
            // Read, not peeked: what is left unread when we close makes
            // the kernel reset the connection, and the client would miss
            // the reply.
            char buf[pregreet_read];
            const ssize_t got = ::recv(sock.native_handle(), buf, sizeof buf, MSG_DONTWAIT);
            const std::string_view sent(buf, static_cast<std::size_t>(std::max<ssize_t>(got, 0)));
            spdlog::info("PREGREET {} after {} from {}: {}", sent.size(), seconds(**talked - t0),
                         where, printable(sent.substr(0, pregreet_shown)));
            v.refusal = "521 5.5.1 Protocol error";
            v.why = smx::Rejection::pregreet;
            v.close = true;
            co_return v;
        }
    }
    if (screened && worst && score >= bl.threshold && bl.reject) {
        v.refusal = "550 5.7.1 Service unavailable; client [" + ip + "] blocked using " + worst->zone;
        v.why = smx::Rejection::dnsbl;
        co_return v;
    }
    if (!trusted && cfg.policy.reject_unknown_client_hostname && v.name == "unknown") {
        v.refusal = name.temporary
                        ? "450 4.7.25 Client host rejected: cannot find your hostname, [" + ip + "]"
                        : "550 5.7.25 Client host rejected: cannot find your hostname, [" + ip + "]";
        v.why = smx::Rejection::unknown_client;
        v.at_rcpt = cfg.policy.delay_reject;
    }
    co_return v;
}

} // namespace smx::smtps
