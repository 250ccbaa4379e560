// A Prometheus histogram with fixed buckets (docs/operation.md lists them).
// QMGR's state lives on its event-loop thread, so observing is a binary
// search in a short array and two additions: no lock, no atomic.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace smx::qmgr {

class Histogram {
public:
    // Upper bounds of the buckets, ascending; +Inf is added.
    explicit Histogram(std::vector<double> bounds)
        : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}

    void observe(double v) {
        ++counts_[static_cast<std::size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) -
                                           bounds_.begin())];
        sum_ += v;
    }
    std::uint64_t count() const;
    // HELP and TYPE lines, cumulative name_bucket{le="..."} lines, name_sum
    // and name_count, in the text exposition format.
    void expose(std::string& out, std::string_view name, std::string_view help) const;

private:
    std::vector<double> bounds_;
    std::vector<std::uint64_t> counts_;  // per bucket, not cumulative; last: over every bound
    double sum_ = 0;
};

// Bucket sets. Seconds, from a fast local fsync to a slow remote server.
inline const std::vector<double> latency_buckets{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                 0.05,   0.1,   0.25,   0.5,   1,    2.5,
                                                 5,      10};
inline const std::vector<double> delivery_buckets{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                                  1,     2.5,  5,     10,   30,  60,   300};
// Seconds from arrival to delivery: a second to five days.
inline const std::vector<double> age_buckets{1,    5,     10,    30,    60,    300,    900,
                                             1800, 3600, 14400, 43200, 86400, 259200, 432000};
// Transactions per IBDB group commit.
inline const std::vector<double> batch_buckets{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};

} // namespace smx::qmgr

namespace smx::qmgr {

// Seconds from from_us to now_us; 0 if the clock went back.
inline double seconds_since(std::uint64_t from_us, std::uint64_t now_us) {
    return now_us > from_us ? static_cast<double>(now_us - from_us) / 1e6 : 0;
}

// Per-label gauges are cut to the largest few, so that a flood of domains
// cannot blow up a scrape (docs/operation.md).
inline constexpr std::size_t max_label_series = 20;
using LabelCounts = std::vector<std::pair<std::string, std::uint64_t>>;
// Keeps the n largest counts, largest first (ties by name).
inline void keep_largest(LabelCounts& v, std::size_t n) {
    auto more = [](const auto& a, const auto& b) {
        return a.second != b.second ? a.second > b.second : a.first < b.first;
    };
    if (v.size() > n) {
        std::partial_sort(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), v.end(), more);
        v.resize(n);
    } else {
        std::sort(v.begin(), v.end(), more);
    }
}

} // namespace smx::qmgr
