// smx-source's options and the shared state of one run: which message is
// next, outcomes, latencies, error counts, and the overall deadline.
#pragma once

#include "perf/message.hpp"

#include "libsm/smtp_io.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace smx::perf {

struct Options {
    std::string host = "127.0.0.1";
    unsigned short port = 0;
    long sessions = 10;
    std::size_t messages = 1000;
    std::string size_spec = "1K";
    long recipients = 1;
    long per_connection = 1;  // like smtp-source: one message per connection
    bool pipelining = false;
    bool starttls = false;  // STARTTLS before the first message (relay-bench --tls)
    std::string from_domain = "source.example";
    std::string rcpt_domain = "sink.example";
    std::string helo = "smx-source.example";
    std::chrono::steady_clock::duration timeout = std::chrono::seconds(60);
    std::chrono::steady_clock::duration deadline = std::chrono::seconds(3600);
    std::uint64_t max_connect_failures = 200;
};

class Run {
public:
    Run(const Options& o, boost::asio::io_context& ctx);

    const Options opt;
    const SizeSpec sizes;

    bool running() const { return !stopped_; }
    // Claims the next message; false when none is left or the run stopped.
    bool take(std::size_t& idx);
    Envelope envelope(std::size_t idx) const;

    void connected() { ++connections_; }
    void connect_failed(const std::string& kind);
    // Counts accepted/refused recipients; returns how many were accepted.
    std::size_t count_rcpts(const std::vector<smx::smtp::Reply>& replies);
    // A failed transaction: `stage` plus the reply class ("mail_5xx").
    void fail(const std::string& stage, int code);
    // The connection died or timed out mid-transaction; always false.
    bool broken(const smx::smtp::Reply& r);
    void finished(int code, std::chrono::steady_clock::duration latency, std::size_t bytes);
    void session_done();

    bool all_delivered() const { return ok_ == opt.messages; }
    std::string report() const;

private:
    void stop();
    void all_done();  // every message has its outcome

    boost::asio::io_context& ctx_;
    boost::asio::steady_timer deadline_;
    long active_;
    bool stopped_ = false;
    bool deadline_hit_ = false;
    std::size_t next_ = 0;
    std::uint64_t ok_ = 0, failed_ = 0, rcpt_ok_ = 0, rcpt_refused_ = 0;
    std::uint64_t connections_ = 0, connect_failures_ = 0, bytes_ = 0;
    std::vector<double> latency_ms_;
    std::map<std::string, std::uint64_t> errors_;
    const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    const double start_epoch_;
    double end_epoch_ = 0;
    std::chrono::steady_clock::time_point end_{};
};

} // namespace smx::perf
