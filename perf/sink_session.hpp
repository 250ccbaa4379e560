// smx-sink's SMTP server side: one coroutine per connection, counters
// shared by all of them (single-threaded io_context, so no locking).
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

namespace smx::perf {

struct SinkOptions {
    unsigned short port = 0;
    std::string bind = "127.0.0.1";
    std::string capture_dir;  // -C: one file per message when set
    double tempfail_pct = 0;  // share of recipients answered 451
    double permfail_pct = 0;  // share of recipients answered 550
    std::uint64_t expect = 0;        // report when this many messages arrived
    std::uint64_t expect_rcpts = 0;  // ... or this many recipients
    bool pipelining = true;
    bool control = false;  // --control: commands on stdin, no exit on --expect
    std::string hostname = "smx-sink.example";
    std::string tls_cert, tls_key;  // both set: STARTTLS offered (relay-bench --tls)
    std::chrono::steady_clock::duration idle_timeout = std::chrono::seconds(300);
};

struct SinkStats {
    std::uint64_t sessions = 0, msgs = 0, rcpts = 0, rcpt_tempfail = 0, rcpt_permfail = 0;
    std::uint64_t bytes = 0;
    std::uint64_t tls_sessions = 0;  // sessions that completed STARTTLS
    double t_first = 0, t_last = 0;
    std::map<std::string, std::uint64_t> errors;
};

struct Sink {
    SinkOptions opt;
    SinkStats stats;
    std::uint64_t expect_base = 0;  // rcpts when the current expectation was armed
    // Called after every accepted message; decides whether --expect is met.
    std::function<void()> on_message;
    // The STARTTLS server context, when tls_cert and tls_key are set.
    std::unique_ptr<boost::asio::ssl::context> tls;
};

boost::asio::awaitable<void> serve(Sink& sink, boost::asio::ip::tcp::socket s);

} // namespace smx::perf
