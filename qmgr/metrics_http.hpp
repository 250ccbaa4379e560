// Prometheus text exposition of QMGR's counters on http://<stats.listen>/metrics
// (optional: off unless [stats] listen is set). HTTP/1.0, one request per
// connection, which is all a scraper needs. It must never hurt mail flow:
// at most max_clients connections at once (more are closed at once), and one
// deadline for each whole request, however slowly the client sends it.
#pragma once

#include "qmgr/qmgr.hpp"

#include <boost/asio.hpp>
#include <string>

namespace smx::qmgr {

class MetricsHttp {
public:
    static constexpr unsigned max_clients = 16;
    static constexpr std::chrono::seconds request_timeout{5};

    MetricsHttp(asio::io_context& io, Qmgr& q) : io_(io), q_(q), acceptor_(io) {}
    bool listen(const std::string& hostport, std::string& err);
    void stop();

private:
    asio::awaitable<void> accept_loop();
    asio::awaitable<void> serve(asio::ip::tcp::socket s);
    asio::awaitable<void> answer(asio::ip::tcp::socket& s);

    asio::io_context& io_;
    Qmgr& q_;
    asio::ip::tcp::acceptor acceptor_;
    unsigned clients_ = 0;
};

// The counters, histograms and per-label gauges in Prometheus's text
// exposition format, each with HELP and TYPE.
std::string prometheus_text(Qmgr& q);

} // namespace smx::qmgr
