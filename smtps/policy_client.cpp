#include "smtps/policy_client.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>


namespace smx::smtps {

namespace asio = boost::asio;
using namespace asio::experimental::awaitable_operators;

std::string encode_policy_request(const PolicyAttributes& attrs) {
    std::string out;
    for (const auto& [name, value] : attrs) {
        out += name;
        out += '=';
        for (char c : value) out += c == '\r' || c == '\n' || c == '\0' ? '?' : c;
        out += '\n';
    }
    out += '\n';
    return out;
}

PolicyReply parse_policy_reply(std::string_view in) {
    PolicyReply r;
    bool have_action = false;
    while (!in.empty()) {
        const auto nl = in.find('\n');
        if (nl == std::string_view::npos) return r;  // the line goes on
        std::string_view line = in.substr(0, nl);
        in.remove_prefix(nl + 1);
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) {
            if (!have_action) {
                r.status = PolicyReply::Status::malformed;
                r.error = "no action in the answer";
                return r;
            }
            // What follows the empty line was never asked for.
            if (!in.empty()) {
                r.status = PolicyReply::Status::malformed;
                r.error = "data after the answer";
                return r;
            }
            r.status = PolicyReply::Status::done;
            return r;
        }
        const auto eq = line.find('=');
        if (eq == std::string_view::npos || eq == 0) {
            r.status = PolicyReply::Status::malformed;
            r.error = "a line that is no name=value";
            return r;
        }
        if (line.substr(0, eq) != "action") continue;
        if (have_action) {
            r.status = PolicyReply::Status::malformed;
            r.error = "two actions in one answer";
            return r;
        }
        have_action = true;
        r.action.assign(line.substr(eq + 1));
    }
    return r;
}

PolicyClient::PolicyClient(asio::any_io_executor ex) : ex_(std::move(ex)) {}

PolicyClient::~PolicyClient() {
    // The idle timers' handlers hold the pool weakly; they find it empty.
    idle_->by_service.clear();
}

std::size_t PolicyClient::idle() const {
    std::size_t n = 0;
    for (const auto& [service, conns] : idle_->by_service) n += conns.size();
    return n;
}

std::unique_ptr<PolicyClient::Conn> PolicyClient::take(const smx::PolicyConfig& cfg,
                                                       const smx::ServiceSocket& service) {
    const auto it = idle_->by_service.find(service.text);
    if (it == idle_->by_service.end()) return nullptr;
    auto& conns = it->second;
    // The most recently used first: the others may reach max_idle and go.
    while (!conns.empty()) {
        std::unique_ptr<Conn> c = std::move(conns.back());
        conns.pop_back();
        c->idle_timer.cancel();
        if (Clock::now() - c->born < cfg.policy_service_max_ttl) return c;
    }
    return nullptr;
}

void PolicyClient::give_back(const smx::PolicyConfig& cfg, const smx::ServiceSocket& service,
                             std::unique_ptr<Conn> c) {
    ++c->requests;
    const auto age = Clock::now() - c->born;
    if (age >= cfg.policy_service_max_ttl ||
        (cfg.policy_service_request_limit != 0 && c->requests >= cfg.policy_service_request_limit))
        return;  // closed here
    c->id = ++idle_->next_id;
    const auto max_ttl_left = std::chrono::duration_cast<Clock::duration>(cfg.policy_service_max_ttl) - age;
    c->idle_timer.expires_after(std::min<Clock::duration>(cfg.policy_service_max_idle, max_ttl_left));
    c->idle_timer.async_wait([pool = std::weak_ptr<Idle>(idle_), key = service.text,
                              id = c->id](const boost::system::error_code& ec) {
        if (ec) return;  // taken again (cancelled), or the loop stops
        const auto p = pool.lock();
        if (!p) return;
        const auto it = p->by_service.find(key);
        if (it == p->by_service.end()) return;
        // Gone already when it was taken (a cancel may come after the
        // timer fired); else closed now.
        it->second.remove_if([id](const std::unique_ptr<Conn>& c) { return c->id == id; });
    });
    idle_->by_service[service.text].push_back(std::move(c));
}

asio::awaitable<std::unique_ptr<PolicyClient::Conn>> PolicyClient::connect(
    const smx::ServiceSocket& service, Clock::duration timeout, std::string& err) {
    asio::steady_timer timer(ex_, timeout);
    asio::generic::stream_protocol::endpoint ep;
    if (!service.path.empty()) {
        ep = asio::local::stream_protocol::endpoint(service.path);
    } else {
        boost::system::error_code ec;
        const auto addr = asio::ip::make_address(service.host, ec);
        if (!ec) {
            ep = asio::ip::tcp::endpoint(addr, service.port);
        } else {
            asio::ip::tcp::resolver resolver(ex_);
            auto res = co_await (resolver.async_resolve(service.host, std::to_string(service.port),
                                                        asio::as_tuple(asio::use_awaitable)) ||
                                 timer.async_wait(asio::as_tuple(asio::use_awaitable)));
            if (res.index() == 1) {
                err = "timeout resolving " + service.host;
                co_return nullptr;
            }
            auto [rec, results] = std::get<0>(std::move(res));
            if (rec || results.empty()) {
                err = "cannot resolve " + service.host + ": " + rec.message();
                co_return nullptr;
            }
            ep = results.begin()->endpoint();
        }
    }
    Socket sock(ex_);
    auto res = co_await (sock.async_connect(ep, asio::as_tuple(asio::use_awaitable)) ||
                         timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (res.index() == 1) {
        err = "connect: timeout";
        co_return nullptr;
    }
    if (auto [ec] = std::get<0>(res); ec) {
        err = "connect: " + ec.message();
        co_return nullptr;
    }
    co_return std::make_unique<Conn>(std::move(sock), ex_);
}

asio::awaitable<std::optional<std::string>> PolicyClient::exchange(Conn& c, const std::string& request,
                                                                  Clock::duration timeout,
                                                                  std::string& err,
                                                                  bool& sent_nothing_back) {
    sent_nothing_back = false;
    asio::steady_timer timer(ex_, timeout);
    auto wrote = co_await (asio::async_write(c.sock, asio::buffer(request),
                                             asio::as_tuple(asio::use_awaitable)) ||
                           timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (wrote.index() == 1) {
        err = "write: timeout";
        co_return std::nullopt;
    }
    if (auto [ec, n] = std::get<0>(wrote); ec) {
        err = "write: " + ec.message();
        sent_nothing_back = true;
        co_return std::nullopt;
    }
    // The answer within one deadline, however it comes in pieces.
    timer.expires_after(timeout);
    std::string in;
    for (;;) {
        // Read into in's tail: at most one octet past the bound comes in.
        const std::size_t had = in.size();
        in.resize(max_policy_reply + 1);
        auto got = co_await (c.sock.async_read_some(asio::buffer(in.data() + had, in.size() - had),
                                                    asio::as_tuple(asio::use_awaitable)) ||
                             timer.async_wait(asio::as_tuple(asio::use_awaitable)));
        if (got.index() == 1) {
            err = "read: timeout";
            co_return std::nullopt;
        }
        auto [ec, n] = std::get<0>(got);
        in.resize(had + n);
        if (ec) {
            err = ec == asio::error::eof ? "read: the server closed the connection" : "read: " + ec.message();
            sent_nothing_back = in.empty();
            co_return std::nullopt;
        }
        if (in.size() > max_policy_reply) {
            err = "answer longer than " + std::to_string(max_policy_reply) + " octets";
            co_return std::nullopt;
        }
        PolicyReply r = parse_policy_reply(in);
        if (r.status == PolicyReply::Status::done) co_return std::move(r.action);
        if (r.status == PolicyReply::Status::malformed) {
            err = "malformed answer: " + r.error;
            co_return std::nullopt;
        }
    }
}

asio::awaitable<std::optional<std::string>> PolicyClient::ask(const smx::PolicyConfig& cfg,
                                                              const smx::ServiceSocket& service,
                                                              const std::string& request) {
    const auto timeout = std::chrono::duration_cast<Clock::duration>(cfg.policy_service_timeout);
    std::string err;
    bool free_retry = true;  // a kept connection the server closed while idle
    for (unsigned attempt = 1; attempt <= cfg.policy_service_try_limit;) {
        std::unique_ptr<Conn> c = take(cfg, service);
        const bool reused = c != nullptr;
        if (!c) c = co_await connect(service, timeout, err);
        if (c) {
            bool nothing_back = false;
            auto action = co_await exchange(*c, request, timeout, err, nothing_back);
            if (action) {
                give_back(cfg, service, std::move(c));
                co_return action;
            }
            if (reused && nothing_back && free_retry) {
                free_retry = false;
                continue;
            }
        }
        if (++attempt > cfg.policy_service_try_limit) break;
        asio::steady_timer pause(ex_, cfg.policy_service_retry_delay);
        co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    }
    spdlog::warn("problem talking to policy server {}: {} ({} attempt{})", service.text, err,
                 cfg.policy_service_try_limit, cfg.policy_service_try_limit == 1 ? "" : "s");
    co_return std::nullopt;
}

} // namespace smx::smtps
