#include "qmgr/metrics_http.hpp"

#include "libsm/accept.hpp"
#include "libsm/smtp_io.hpp"
#include "qmgr/build_info.hpp"
#include "qmgr/server.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include <array>
#include <cstring>
#include <string_view>

namespace smx::qmgr {

namespace {

// A label value: backslash, double quote and newline escaped.
std::string label_value(std::string_view v) {
    std::string out;
    for (char c : v) {
        if (c == '\\' || c == '"') out += '\\';
        if (c == '\n') out += "\\n";
        else out += c;
    }
    return out;
}

void expose_labels(std::string& out, std::string_view name, std::string_view label,
                   std::string_view help, const LabelCounts& values) {
    out += fmt::format("# HELP {} {}\n# TYPE {} gauge\n", name, help, name);
    for (const auto& [v, n] : values)
        out += fmt::format("{}{{{}=\"{}\"}} {}\n", name, label, label_value(v), n);
}

} // namespace

std::string prometheus_text(Qmgr& q) {
    std::string out =
        "# HELP smx_build_info The version of smx and the commit it was built from\n"
        "# TYPE smx_build_info gauge\n";
    out += fmt::format("smx_build_info{{version=\"{}\",commit=\"{}\"}} 1\n",
                       label_value(SMX_VERSION), label_value(SMX_COMMIT));
    for (const Metric& m : q.metrics()) {
        const std::string name = fmt::format("smx_{}{}", m.name, m.counter ? "_total" : "");
        out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, m.help, name,
                           m.counter ? "counter" : "gauge", name, m.shown());
    }
    out += "# HELP smx_rejected_total SMTP replies that refused a connection, command or message, "
           "by reply class and reason (reported by SMTPS each second)\n"
           "# TYPE smx_rejected_total counter\n";
    for (const auto& e : q.smtp_rejections().entries())
        out += fmt::format("smx_rejected_total{{class=\"{}xx\",reason=\"{}\"}} {}\n", e.reply_class,
                           smx::rejection_name(e.reason), e.n);
    out += "# HELP smx_milter_failures_total Milters that failed (unreachable, timed out, closed, "
           "broke the protocol), by the default action that stood for them (SMTPS and "
           "smx-pickup)\n"
           "# TYPE smx_milter_failures_total counter\n";
    // MilterAction's order (libsm/config.hpp).
    constexpr std::array<std::string_view, smx::msg::milter_actions> actions = {
        "tempfail", "accept", "reject", "quarantine"};
    for (std::size_t a = 0; a < actions.size(); ++a)
        out += fmt::format("smx_milter_failures_total{{action=\"{}\"}} {}\n", actions[a],
                           q.milter_failures()[a]);
    for (const auto& h : q.histograms()) h.h.expose(out, h.name, h.help);
    expose_labels(out, "smx_destination_active_recipients", "destination",
                  "Recipients waiting or out for delivery per destination (the 20 largest)",
                  q.active_by_destination());
    expose_labels(out, "smx_smtps_loop_sessions", "loop",
                  "SMTP connections each SMTPS event loop serves (reported each second)",
                  q.smtps_sessions_by_loop());
    expose_labels(out, "smx_domain_deferred_recipients", "domain",
                  "Deferred recipients per recipient domain (the 20 largest; counted every 30 s)",
                  q.deferred_by_domain());
    return out;
}

bool MetricsHttp::listen(const std::string& hostport, std::string& err) {
    const smx::HostPort hp = smx::parse_hostport("stats.listen", hostport, 9525);
    boost::system::error_code ec;
    const auto addr = asio::ip::make_address(hp.host, ec);
    if (ec) {
        err = "not an IP address: " + hp.host;
        return false;
    }
    const asio::ip::tcp::endpoint ep(addr, hp.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
        err = "listen on " + hostport + ": " + ec.message();
        return false;
    }
    asio::co_spawn(io_, accept_loop(), smx::crash_on_exception("metrics accept"));
    spdlog::info("metrics on http://{}/metrics", hostport);
    return true;
}

void MetricsHttp::stop() {
    boost::system::error_code ec;
    acceptor_.close(ec);
}

asio::awaitable<void> MetricsHttp::accept_loop() {
    smx::AcceptGuard guard("metrics",
                          "HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    for (;;) {
        auto s = co_await guard.next(acceptor_);
        if (!s) break;
        asio::co_spawn(io_, serve(std::move(*s)), smx::crash_on_exception("metrics request"));
    }
}

asio::awaitable<void> MetricsHttp::serve(asio::ip::tcp::socket s) {
    using namespace asio::experimental::awaitable_operators;
    boost::system::error_code ec;
    if (clients_ >= max_clients) {
        s.close(ec);  // a scraper retries; a flood must not cost descriptors
        co_return;
    }
    ++clients_;
    struct Release {
        unsigned& n;
        ~Release() { --n; }
    } release{clients_};
    asio::steady_timer deadline(s.get_executor(), request_timeout);
    co_await (answer(s) || deadline.async_wait(asio::as_tuple(asio::use_awaitable)));
    s.shutdown(asio::ip::tcp::socket::shutdown_both, ec);
}

// Reads one request and writes the answer (the caller bounds the time).
asio::awaitable<void> MetricsHttp::answer(asio::ip::tcp::socket& s) {
    constexpr auto http_timeout = request_timeout;
    smx::smtp::LineReader<asio::ip::tcp::socket> in(s, 1024);
    auto req = co_await in.read_line(http_timeout);
    if (req.status != smx::smtp::ReadStatus::ok || !req.complete) co_return;
    // "GET /metrics HTTP/1.1"; a query string is no matter (a scraper's
    // params, a cache buster).
    std::string_view target(req.text);
    bool ok = false;
    if (target.starts_with("GET ")) {
        target.remove_prefix(4);
        target = target.substr(0, target.find(' '));
        ok = target.substr(0, target.find('?')) == "/metrics";
    }
    // Headers up to the empty line; their content does not matter.
    for (int n = 0; n < 100; ++n) {
        auto h = co_await in.read_line(http_timeout);
        if (h.status != smx::smtp::ReadStatus::ok) co_return;
        if (h.complete && (h.text.empty() || h.text == "\r")) break;
    }
    const std::string body = ok ? prometheus_text(q_) : "not found; try /metrics\n";
    std::string resp = ok ? "HTTP/1.0 200 OK\r\n" : "HTTP/1.0 404 Not Found\r\n";
    resp += "Content-Type: text/plain; version=0.0.4\r\nContent-Length: " +
            std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
    co_await smx::smtp::write_all(s, resp, http_timeout);
}

} // namespace smx::qmgr
