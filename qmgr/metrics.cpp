// What the Prometheus endpoint shows beside the counters: the histograms of
// QMGR's components and the per-destination gauges (docs/operation.md).
#include "qmgr/qmgr.hpp"

#include "libsm/domain.hpp"

#include <unordered_map>

namespace smx::qmgr {

namespace {
// A DEFEDB scan costs about as much as `smx queue`: not more often.
constexpr std::uint64_t deferred_scan_us = 30'000'000;
} // namespace

std::vector<Qmgr::HistogramRef> Qmgr::histograms() const {
    const IbdbStats& s = ibdb_.stats();
    return {
        {"smx_ack_latency_seconds",
         "End of DATA to QMGR's acknowledgement (the 250), accepted messages",
         counters_.ack_seconds},
        {"smx_ibdb_fsync_seconds", "Duration of a group commit's sync (content syncfs and/or envelope-log fdatasync)",
         s.fsync_seconds},
        {"smx_ibdb_batch_size", "Transactions per envelope-log group commit", s.batch_size},
        {"smx_delivery_latency_seconds", "DELIVER to SMTPC until its RESULT, per delivery attempt",
         sched_.delivery_seconds()},
        {"smx_queue_age_seconds", "Arrival to delivery, per delivered recipient",
         counters_.queue_age_seconds},
    };
}

LabelCounts Qmgr::active_by_destination() const {
    return sched_.recipients_by_destination(max_label_series);
}

const LabelCounts& Qmgr::deferred_by_domain() {
    const std::uint64_t now = clock_.now_us();
    auto& shape = deferred_shape_;
    if (shape.busy || (shape.scanned_us && now - shape.scanned_us < deferred_scan_us))
        return shape.top;
    shape.busy = true;
    tasks_.spawn(ex_, scan_deferred_domains(now), "deferred-by-domain scan");
    return shape.top;
}

asio::awaitable<void> Qmgr::scan_deferred_domains(std::uint64_t now) {
    auto count = [](Defedb& db) {
        std::unordered_map<std::string, std::uint64_t> n;
        db.for_each([&](const DeferredTa& t) {
            for (const auto& r : t.rcpts) ++n[smx::domain_of(r.addr)];
        });
        LabelCounts top(n.begin(), n.end());
        keep_largest(top, max_label_series);
        return top;
    };
    auto top = co_await dbq_.run(std::move(count));
    deferred_shape_.busy = false;
    deferred_shape_.scanned_us = now;
    if (top) deferred_shape_.top = std::move(*top);
}

} // namespace smx::qmgr
