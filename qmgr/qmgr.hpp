// QMGR's state machine: intake of transactions from SMTPS, scheduling to
// SMTPC, results, the deferred queue (DEFEDB), bounces, control. Everything
// here runs on the io_context thread; IBDB and DEFEDB do their blocking work
// on the worker pool and call back here. Member functions live in files named
// by role: intake.cpp, results.cpp, deferred.cpp, bounce.cpp, control.cpp,
// recovery.cpp, qmgr.cpp (routing glue and completion).
#pragma once

#include "defedb.hpp"
#include "defedb_strand.hpp"
#include "deferred.hpp"
#include "dsn.hpp"
#include "ibdb.hpp"
#include "queue.hpp"
#include "reaper.hpp"
#include "routing.hpp"
#include "scheduler.hpp"
#include "sweeper.hpp"

#include "config.hpp"
#include "messages.hpp"

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
    std::uint64_t bounced = 0;    // recipients: status=bounced
    std::uint64_t dsn_sent = 0;   // DSNs queued
    std::uint64_t quarantined = 0;  // orphan files and envelopes without content
    unsigned smtps_connections = 0;
};

class Qmgr {
public:
    // Sends one encoded frame to the peer that the callback belongs to.
    using Send = std::function<void(std::string frame)>;
    using CtlDone = std::function<void(sm::msg::CtlReply)>;

    Qmgr(const sm::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers, Ibdb& ibdb,
         Defedb& defedb);

    // Start-up: puts the transactions IBDB recovered back in the queue,
    // starts the DEFEDB timer and checkpoints, and the orphan CDB sweep
    // (every orphan_age / 2, in the background).
    void restore(std::vector<RecoveredTa> tas);

    // SMTPS: one TA_COMMIT; the TA_ACK goes out through reply.
    void on_commit(sm::msg::TaCommit env, std::uint64_t req_id, Send reply);
    // Shutdown: further TA_COMMITs get a tempfail, timers stop.
    void stop();

    // SMTPC links and their RESULTs.
    std::uint64_t add_smtpc(Send send) { return sched_.add_link(std::move(send)); }
    void remove_smtpc(std::uint64_t link) { sched_.remove_link(link); }
    // `missing` is the retry reason of recipients the RESULT does not name.
    void on_result(std::uint64_t link, const sm::msg::Result& r,
                   std::string_view missing = "4.4.0 smtpc returned no result for this recipient");

    // CLI requests (answered through done, possibly after DEFEDB work on
    // the pool); and the counters for `smx stats` and Prometheus.
    void control(const sm::msg::CtlRequest& req, CtlDone done);
    std::vector<std::pair<const char*, std::uint64_t>> metrics() const;

    Counters& counters() { return counters_; }
    const ActiveQueue& queue() const { return queue_; }

private:
    struct Bounce {
        std::uint32_t idx = 0;
        dsn::FailedRcpt why;
    };

    // intake.cpp
    void committed(const std::string& id, std::uint64_t req_id, const Send& reply, bool ok,
                   const std::string& error);
    void check_disk();
    // qmgr.cpp: routes recipients of ta and hands them to the scheduler.
    void schedule(Ta& ta, const std::vector<std::uint32_t>& idx);
    void check_ta(Ta& ta);
    // The deferred queue's answers: parks durable in DEFEDB (and transactions
    // it holds nothing of any more), due recipients back from it.
    void parked(std::vector<DeferredQueue::Park> parks, std::vector<DeferredQueue::Check> gone);
    void got_due(std::vector<DeferredTa> tas);
    // Takes back deliveries SMTPC has held past queue.max_delivery_time.
    void reclaim_overdue();
    // results.cpp
    void sent(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& status);
    void retry_later(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& why);
    void defer(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& why,
               std::uint64_t until_us);
    bool expired(const Ta& ta) const;
    // bounce.cpp
    void bounce(Ta& ta, std::uint32_t idx, const std::string& relay, dsn::FailedRcpt why);
    void warn_if_late(Ta& ta, std::uint32_t idx, const std::string& relay);
    void report(std::map<std::string, std::vector<Bounce>>& to, Ta& ta, std::uint32_t idx,
                dsn::FailedRcpt why);
    void flush_reports();
    void queue_dsn(Ta& ta, const std::vector<Bounce>& list, const char* kind,
                   std::function<void(const std::string&)> done);
    void bounced(const std::string& ta_id, const std::vector<Bounce>& list);
    // Why the sender of ta gets no DSN (null sender, bounce_untrusted), or
    // nullptr when it does.
    const char* no_dsn_reason(const Ta& ta) const;
    // control.cpp
    void ctl_queue(CtlDone done);
    void ctl_flush(CtlDone done);
    void ctl_hold(const std::string& id, bool hold, CtlDone done);
    void ctl_delete(const std::string& id, CtlDone done);
    const sm::Config& cfg_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    DefedbStrand dbq_;
    Ibdb& ibdb_;
    std::string spool_;
    ActiveQueue queue_;
    Reaper reaper_;
    OrphanSweeper sweeper_;
    DeferredQueue deferred_;
    Router router_;
    Scheduler sched_;
    Counters counters_;
    // Recipients failed for good (or late), by transaction: one DSN each.
    std::map<std::string, std::vector<Bounce>> bounces_, delays_;
    asio::steady_timer disk_timer_;
    bool disk_low_ = false;
    asio::steady_timer reclaim_timer_;
    bool accepting_ = true;
};

// "250 2.0.0 Ok" from a per-recipient result.
std::string reply_text(const sm::msg::RcptResult& r);
// True when no server took part: connect failures, timeouts, a 421 greeting.
bool connection_failed(const sm::msg::Result& r);
// Retry delay after the n-th failed attempt: retry_min doubling to retry_max.
std::chrono::microseconds backoff(const sm::QueueConfig& q, std::uint32_t attempts);
// A reply text "451 4.3.0 text" split for a DSN (code, status, text).
dsn::FailedRcpt failed_rcpt(const std::string& addr, const std::string& reply);
// The end of the queue lifetime after last_error (status 4.4.7).
dsn::FailedRcpt expired_rcpt(const std::string& addr, const std::string& last_error,
                             const std::string& relay, std::uint64_t last_attempt_us);

} // namespace smx::qmgr
