// QMGR's state machine: intake of transactions from SMTPS, scheduling to
// SMTPC, results, retries, control. Everything here runs on the io_context
// thread; IBDB does its blocking work on the worker pool and calls back here.
// Member functions live in files named by role: intake.cpp, results.cpp,
// control.cpp, qmgr.cpp (routing glue and completion).
#pragma once

#include "ibdb.hpp"
#include "queue.hpp"
#include "routing.hpp"
#include "scheduler.hpp"

#include "config.hpp"
#include "messages.hpp"

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
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
    unsigned smtps_connections = 0;
};

class Qmgr {
public:
    // Sends one encoded frame to the peer that the callback belongs to.
    using Send = std::function<void(std::string frame)>;

    Qmgr(const sm::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers, Ibdb& ibdb);

    // Start-up: puts the transactions IBDB recovered back in the queue.
    void restore(std::vector<RecoveredTa> tas);

    // SMTPS: one TA_COMMIT; the TA_ACK goes out through reply.
    void on_commit(sm::msg::TaCommit env, std::uint64_t req_id, Send reply);
    // Shutdown: further TA_COMMITs get a tempfail.
    void stop_intake() { accepting_ = false; }

    // SMTPC links and their RESULTs.
    std::uint64_t add_smtpc(Send send) { return sched_.add_link(std::move(send)); }
    void remove_smtpc(std::uint64_t link) { sched_.remove_link(link); }
    void on_result(std::uint64_t link, const sm::msg::Result& r);

    // CLI requests; and the counters for `smx stats` and Prometheus.
    sm::msg::CtlReply control(const sm::msg::CtlRequest& req) const;
    std::vector<std::pair<const char*, std::uint64_t>> metrics() const;

    Counters& counters() { return counters_; }
    const ActiveQueue& queue() const { return queue_; }

private:
    void committed(const std::string& id, std::uint64_t req_id, const Send& reply,
                   bool ok, const std::string& error);
    void check_disk();
    // Routes recipients of ta and hands them to the scheduler by destination.
    void schedule(Ta& ta, const std::vector<std::uint32_t>& idx);
    void final(Ta& ta, std::uint32_t idx, RcptState state, const std::string& relay,
               const std::string& status);
    void defer(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& why,
               std::uint64_t until_us);
    void retry_later(Ta& ta, std::uint32_t idx, const std::string& relay, const std::string& why);
    void finish_ta(Ta& ta);
    void unlink_later(const std::string& cdb_id);
    void arm_retry();
    void retry_due();

    const sm::Config& cfg_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    Ibdb& ibdb_;
    std::string spool_;
    // CDB files to remove, handed to the worker pool once per event-loop
    // turn rather than one task (and one thread wake-up) per message.
    std::vector<std::string> unlinks_;
    ActiveQueue queue_;
    Router router_;
    Scheduler sched_;
    Counters counters_;
    asio::system_timer retry_timer_;
    std::uint64_t retry_armed_us_ = 0;  // 0: no wait pending
    asio::steady_timer disk_timer_;
    bool disk_low_ = false;
    bool accepting_ = true;
};

// "250 2.0.0 Ok" from a per-recipient result.
std::string reply_text(const sm::msg::RcptResult& r);
// True when no server took part: connect failures, timeouts, a 421 greeting.
bool connection_failed(const sm::msg::Result& r);
// Retry delay after the n-th failed attempt: retry_min doubling to retry_max.
std::chrono::microseconds backoff(const sm::QueueConfig& q, std::uint32_t attempts);

} // namespace smx::qmgr
