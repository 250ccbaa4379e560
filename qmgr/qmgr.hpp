// QMGR: the glue between its components, each owning its own state (see
// docs/qmgr.md for the map and how a message flows):
//   ActiveQueue (queue.cpp)      transactions and recipient state, checked
//                                transitions (the table is in queue.hpp)
//   Scheduler (scheduler.cpp)    destination queues, windows, SMTPC links
//   DeferredQueue (deferred.cpp) DEFEDB batches and writer, due loop, leases
//   Bouncer (bounce.cpp)         DSNs and delay warnings
//   Reaper (reaper.cpp)          whether and when a content file goes
//   OrphanSweeper (sweeper.cpp)  content files nobody names
//   DefedbStrand                 the order of DEFEDB calls
//   DiskSpace (disk_space.cpp)   room intake may take, emergency reserve files
//   Anvil (anvil.cpp)            per-client connection and rate counts
// Qmgr itself: intake and the disk watch (intake.cpp), results
// (results.cpp), control (control.cpp; the queue reports in
// queue_report.cpp), metrics beside the counters (metrics.cpp), start-up
// (recovery.cpp), and the components' answers (qmgr.cpp). Everything here
// runs on the io_context thread. Work for the pool is awaited by coroutines
// (coro.hpp) that read top to bottom; IBDB keeps its group-commit callback
// (on_commit -> committed). Each component counts its coroutines, and stop()
// makes them end: drain() runs the loop until they have, before the pool and
// the loop go.
#pragma once

#include "qmgr/anvil.hpp"
#include "qmgr/bounce.hpp"
#include "qmgr/coro.hpp"
#include "qmgr/defedb.hpp"
#include "qmgr/defedb_strand.hpp"
#include "qmgr/deferred.hpp"
#include "qmgr/disk_space.hpp"
#include "qmgr/dsn.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/queue.hpp"
#include "qmgr/reaper.hpp"
#include "qmgr/routing.hpp"
#include "qmgr/scheduler.hpp"
#include "qmgr/segments.hpp"
#include "qmgr/smtps_loads.hpp"
#include "qmgr/sweeper.hpp"

#include "libsm/config.hpp"
#include "libsm/content_trust.hpp"
#include "libsm/messages.hpp"

#include "libsm/clock.hpp"

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

struct Counters {
    std::uint64_t received = 0;   // transactions acked to SMTPS
    std::uint64_t rejected = 0;   // TA_COMMITs refused as invalid
    std::uint64_t tempfailed = 0; // TA_COMMITs refused for now (full, I/O error)
    std::uint64_t delivered = 0;  // recipients: status=sent
    std::uint64_t deferred = 0;   // recipient deferrals
    std::uint64_t quarantined = 0;  // orphan files and envelopes without content
    // End of DATA (the arrival SMTPS stamps) to TA_ACK, accepted mail only.
    Histogram ack_seconds{latency_buckets};
    // Arrival to delivery, per delivered recipient.
    Histogram queue_age_seconds{age_buckets};
};

// One counter or level for `smx stats` and Prometheus, with what the
// scrape says of it (HELP, and TYPE counter or gauge). Prometheus shows it
// as smx_NAME, a counter as smx_NAME_total.
struct Metric {
    const char* name;
    std::uint64_t value;
    bool counter;  // only grows; otherwise a level (gauge)
    const char* help;
    double unit = 0;  // set: value * unit is shown (microseconds as seconds: 1e-6)
    std::string shown() const {
        return unit ? fmt::format("{}", static_cast<double>(value) * unit) : std::to_string(value);
    }
};

class Qmgr {
public:
    // Sends one encoded frame to the peer that the callback belongs to.
    using Send = std::function<void(std::string frame)>;
    using CtlDone = std::function<void(smx::msg::CtlReply)>;

    Qmgr(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers, Ibdb& ibdb,
         Defedb& defedb, const smx::Clock& clock = smx::system_clock());

    // Start-up: puts the transactions IBDB recovered back in the queue,
    // starts the DEFEDB timer and checkpoints, and the orphan content sweep
    // (every orphan_age / 2, in the background).
    void restore(std::vector<RecoveredTa> tas);

    // SMTPS or smx-pickup: one TA_COMMIT; the TA_ACK goes out through reply.
    // Each may name only ids of its own streams. A pickup commit may repeat
    // one whose ack pickup never read: it is refused as a duplicate while
    // the transaction is in memory or in DEFEDB.
    enum class From { smtps, pickup };
    void on_commit(smx::msg::TaCommit env, std::uint64_t req_id, Send reply,
                   From from = From::smtps);
    // Shutdown: further TA_COMMITs get a tempfail, timers stop, and each
    // component's coroutines run to their end (idle() once they have).
    void stop();
    // Reload (libsm/config_reload.hpp): recipients routed from now on follow cfg's
    // [routes] and routing tables, the scheduler takes the new client.rate_limit,
    // the anvil [anvil]; QMGR's other parts keep the config they started with
    // (the keys they use need a restart). A table that cannot be opened
    // refuses the reload (throws, before anything changed).
    void reload(std::shared_ptr<const smx::Config> cfg) {
        const auto rate = cfg->client.rate_limit;
        const auto interval = cfg->client.rate_interval;
        const auto window = cfg->anvil.rate_time_unit;
        const auto max_clients = cfg->anvil.max_clients;
        router_.reload(std::move(cfg));
        sched_.set_rate(rate, interval);
        anvil_.configure(window, max_clients);
    }
    bool idle() const;

    // SMTPC links and their RESULTs.
    std::uint64_t add_smtpc(Send send) { return sched_.add_link(std::move(send)); }
    void remove_smtpc(std::uint64_t link) { sched_.remove_link(link); }
    // `missing` is the retry reason of recipients the RESULT does not name.
    void on_result(std::uint64_t link, const smx::msg::Result& r,
                   const smx::msg::Reply& missing = {0, "4.4.0", "smtpc returned no result for this recipient"});

    // CLI requests (answered through done, possibly after DEFEDB work on
    // the pool); and the counters for `smx stats` and Prometheus.
    void control(const smx::msg::CtlRequest& req, CtlDone done);
    std::vector<Metric> metrics() const;
    // metrics.cpp: the histograms, and the per-label gauges for Prometheus.
    struct HistogramRef {
        const char* name;
        const char* help;
        const Histogram& h;
    };
    std::vector<HistogramRef> histograms() const;
    LabelCounts active_by_destination() const;
    // From a DEFEDB scan started when the last one is 30 s old (on a scrape):
    // the caller gets the previous result meanwhile.
    const LabelCounts& deferred_by_domain();

    // SMTPS links come and go and report their loop's load; a TA_COMMIT
    // too large to decode was refused.
    std::uint64_t add_smtps() { return smtps_loads_.add_link(); }
    void remove_smtps(std::uint64_t link) {
        smtps_loads_.remove_link(link);
        anvil_.drop_link(link);
    }
    // A link's per-client request (ANVIL_REQ): the reply, if it gets one.
    std::optional<smx::msg::AnvilReply> anvil(std::uint64_t link, const smx::msg::AnvilRequest& r) {
        return anvil_.handle(link, r, std::chrono::steady_clock::now());
    }
    void smtps_load(std::uint64_t link, const smx::msg::SmtpsLoad& l) { smtps_loads_.update(link, l); }
    // smx-pickup's report: its milter failures.
    void pickup_load(const smx::msg::SmtpsLoad& l) { smtps_loads_.add_counts(l); }
    LabelCounts smtps_sessions_by_loop() const { return smtps_loads_.sessions_by_loop(); }
    void commit_refused() { ++counters_.rejected; }
    // SMTPS's refusals, as reported with its loads.
    const smx::RejectionCounts& smtp_rejections() const { return smtps_loads_.rejected(); }
    // Milter failures (SMTPS's and smx-pickup's), by default action.
    const smx::msg::MilterFailureCounts& milter_failures() const {
        return smtps_loads_.milter_failures();
    }
    const ActiveQueue& queue() const { return queue_; }

private:
    // intake.cpp
    void intake(smx::msg::TaCommit env, std::uint64_t req_id, Send reply, From from);
    asio::awaitable<void> intake_pickup(smx::msg::TaCommit env, std::uint64_t req_id, Send reply);
    void committed(const std::string& id, std::uint64_t req_id, const Send& reply, bool ok,
                   const std::string& error);
    asio::awaitable<void> watch_disk();
    // qmgr.cpp: routes recipients of ta and hands them to the scheduler.
    void schedule(Ta& ta, const std::vector<std::uint32_t>& idx);
    // Recipients of a transaction new to the queue (intake, recovery):
    // scheduled, put on hold when an access HOLD came with it, or bounced
    // when smx-pickup's milters refused it.
    void start(Ta& ta, const std::vector<std::uint32_t>& idx);
    // control.cpp: an active recipient parked held in DEFEDB (unindexed,
    // so nothing schedules it until `smx release`), with why.
    void park_held(Ta& ta, std::uint32_t idx, smx::msg::Reply why, std::string relay);
    void check_ta(Ta& ta);
    // The deferred queue's answers: parks durable in DEFEDB (and transactions
    // it holds nothing of any more), due recipients back from it.
    void parked(std::vector<DeferredQueue::Park> parks, std::vector<DeferredQueue::Check> gone);
    void got_due(std::vector<DeferredTa> tas);
    // The bouncer's answers: the report is durable (or not wanted), or it
    // could not be queued.
    void bounced(const std::string& ta_id, const std::vector<Bouncer::Bounce>& list);
    void bounce_failed(const std::string& ta_id, const std::vector<Bouncer::Bounce>& list,
                       const std::string& error);
    // Takes back deliveries SMTPC has held past queue.max_delivery_time.
    asio::awaitable<void> reclaim_overdue();
    // results.cpp
    void sent(Ta& ta, std::uint32_t idx, const Attempt& at, const smx::msg::Reply& reply);
    void retry_later(Ta& ta, std::uint32_t idx, const Attempt& at, smx::msg::Reply why);
    void defer(Ta& ta, std::uint32_t idx, const Attempt& at, smx::msg::Reply why,
               std::uint64_t until_us);
    bool expired(const Ta& ta) const;
    // A transaction whose content SMTPC found unusable: its envelope to
    // quarantine/, and it leaves memory at once and DEFEDB after.
    void quarantine(Ta& ta, const std::string& why);
    asio::awaitable<void> drop_deferred(std::string id, std::string content, std::size_t here);
    // control.cpp
    asio::awaitable<void> ctl_flush(CtlDone done);
    asio::awaitable<void> ctl_ids(smx::msg::CtlRequest req, CtlDone done);
    asio::awaitable<std::optional<std::size_t>> hold_ta(std::string id, bool hold);
    asio::awaitable<std::optional<std::size_t>> delete_ta(std::string id);
    std::size_t forget(Ta& ta, std::string& content);
    // metrics.cpp: counts DEFEDB's recipients by domain for deferred_by_domain.
    asio::awaitable<void> scan_deferred_domains(std::uint64_t now);
    // queue_report.cpp: queue, qshape, show; requeue
    asio::awaitable<void> ctl_report(smx::msg::CtlRequest req, CtlDone done);
    asio::awaitable<void> ctl_requeue(smx::msg::CtlRequest req, CtlDone done);
    // The messages with a recipient in one of queues ("active", "deferred",
    // "hold"), in id order; nullopt when DEFEDB cannot be read.
    asio::awaitable<std::optional<std::vector<std::string>>> queue_ids(std::vector<std::string> queues);

    const smx::Config& cfg_;
    const smx::Clock& clock_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    DefedbStrand dbq_;
    Ibdb& ibdb_;
    smx::content::Store store_;  // where content is read, and who wrote it
    ActiveQueue queue_;
    Reaper reaper_;
    OrphanSweeper sweeper_;
    Segments segments_;
    DeferredQueue deferred_;
    Bouncer bouncer_;
    Router router_;
    Scheduler sched_;
    Counters counters_;
    SmtpsLoads smtps_loads_;
    Anvil anvil_;
    DiskSpace space_;
    asio::steady_timer disk_timer_;
    bool disk_short_ = false;  // as the disk watch last logged it
    asio::steady_timer reclaim_timer_;
    bool accepting_ = true;
    struct DeferredShape {
        LabelCounts top;
        std::uint64_t scanned_us = 0;
        bool busy = false;
    } deferred_shape_;
    Coroutines tasks_;  // Qmgr's own: disk watch, reclaim, control requests, scans
};

// After stop(): runs io until q is idle, with the worker pool still running
// (so the pool work a coroutine awaits completes); panics after `limit`.
// Then the pool and io may go without destroying a suspended coroutine.
void drain(asio::io_context& io, const Qmgr& q,
           std::chrono::milliseconds limit = std::chrono::seconds(30));

// True when no server took part: connect failures, timeouts, a 421 greeting.
bool connection_failed(const smx::msg::Result& r);
// Retry delay after the n-th failed attempt: retry_min doubling to retry_max.
std::chrono::microseconds backoff(const smx::QueueConfig& q, std::uint32_t attempts);

} // namespace smx::qmgr
