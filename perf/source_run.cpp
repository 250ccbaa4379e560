#include "perf/source_run.hpp"

#include "perf/common.hpp"

#include <algorithm>
#include <cmath>

namespace smx::perf {

namespace {
std::string reply_class(const std::string& stage, int code) {
    return code ? stage + "_" + std::to_string(code / 100) + "xx" : stage;
}

// Nearest-rank percentile of sorted values.
double percentile(const std::vector<double>& v, double p) {
    if (v.empty()) return 0;
    const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
    return v[std::min(v.size() - 1, rank ? rank - 1 : 0)];
}
} // namespace

Run::Run(const Options& o, boost::asio::io_context& ctx)
    : opt(o), sizes(o.size_spec), ctx_(ctx), deadline_(ctx, o.deadline), active_(o.sessions),
      start_epoch_(epoch_seconds()) {
    latency_ms_.reserve(o.messages);
    deadline_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;  // cancelled: every session finished in time
        deadline_hit_ = true;
        stop();
    });
}

bool Run::take(std::size_t& idx) {
    if (stopped_ || next_ >= opt.messages) return false;
    idx = next_++;
    return true;
}

Envelope Run::envelope(std::size_t idx) const {
    return envelope_of(idx, opt.from_domain, opt.rcpt_domain, opt.recipients);
}

void Run::connect_failed(const std::string& kind) {
    ++errors_[kind];
    if (++connect_failures_ > opt.max_connect_failures) {
        ++errors_["gave_up_connecting"];
        stop();
    }
}

std::size_t Run::count_rcpts(const std::vector<smx::smtp::Reply>& replies) {
    std::size_t n = 0;
    for (const auto& r : replies) {
        if (r.code / 100 == 2) {
            ++n;
            ++rcpt_ok_;
        } else {
            ++rcpt_refused_;
            ++errors_[reply_class("rcpt", r.code)];
        }
    }
    return n;
}

void Run::fail(const std::string& stage, int code) {
    ++errors_[reply_class(stage, code)];
    if (++failed_ + ok_ == opt.messages) all_done();
}

bool Run::broken(const smx::smtp::Reply& r) {
    fail(r.status == smx::smtp::ReadStatus::timeout ? "timeout" : "io", 0);
    return false;
}

void Run::finished(int code, std::chrono::steady_clock::duration latency, std::size_t bytes) {
    if (code / 100 != 2) {
        fail("dot", code);
        return;
    }
    ++ok_;
    bytes_ += bytes;
    latency_ms_.push_back(std::chrono::duration<double, std::milli>(latency).count());
    if (ok_ + failed_ == opt.messages) all_done();
}

void Run::all_done() {
    end_ = std::chrono::steady_clock::now();
    end_epoch_ = epoch_seconds();
    // Sessions without a message left may still wait for a greeting from a
    // relay whose process limit is reached (1000 sessions): give the others
    // a moment to QUIT, then end the run instead of waiting for them.
    deadline_.expires_after(std::chrono::seconds(2));
    deadline_.async_wait([this](boost::system::error_code ec) {
        if (!ec) stop();
    });
}

void Run::session_done() {
    if (--active_ == 0) deadline_.cancel();
}

void Run::stop() {
    stopped_ = true;
    ctx_.stop();
}

std::string Run::report() const {
    // The injection time ends with the last acknowledged message, not with
    // the slowest QUIT, so that msgs_per_s is what the relay sustained.
    const auto end = end_ == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now() : end_;
    const double secs = std::chrono::duration<double>(end - start_).count();
    std::vector<double> lat = latency_ms_;
    std::sort(lat.begin(), lat.end());
    auto errors = errors_;
    if (deadline_hit_) errors["deadline"] = opt.messages - ok_ - failed_;
    std::string o = "{\"tool\":\"smx-source\"";
    o += ",\"msgs\":" + std::to_string(ok_);
    o += ",\"attempted\":" + std::to_string(next_);
    o += ",\"failed\":" + std::to_string(failed_);
    o += ",\"rcpts_ok\":" + std::to_string(rcpt_ok_);
    o += ",\"rcpts_refused\":" + std::to_string(rcpt_refused_);
    o += ",\"connections\":" + std::to_string(connections_);
    o += ",\"bytes\":" + std::to_string(bytes_);
    o += ",\"sessions\":" + std::to_string(opt.sessions);
    o += ",\"seconds\":" + fixed(secs, 4);
    o += ",\"msgs_per_s\":" + fixed(secs > 0 ? static_cast<double>(ok_) / secs : 0, 1);
    o += ",\"t_start\":" + fixed(start_epoch_, 4);
    o += ",\"t_end\":" + fixed(end_epoch_ ? end_epoch_ : epoch_seconds(), 4);
    o += ",\"latency_ms\":{\"p50\":" + fixed(percentile(lat, 50)) +
         ",\"p90\":" + fixed(percentile(lat, 90)) + ",\"p99\":" + fixed(percentile(lat, 99)) +
         ",\"max\":" + fixed(lat.empty() ? 0 : lat.back()) + "}";
    o += ",\"errors\":" + json_counts(errors) + "}";
    return o;
}

} // namespace smx::perf
