// The scheduler: one queue per destination, each with a postfix-style
// concurrency window (slow start from initial_concurrency, +1/window per
// delivery that reached a server, -1 per connection failure; after a cohort of
// failures without a success the destination is dead for dead_time), an
// optional rate limit (DELIVERs spaced rate_interval / rate_limit apart), and
// the SMTPC links the DELIVERs are spread over.
//
// Destinations with work and room in their window wait in a ready list that
// pump() serves round robin, one DELIVER per turn, so no step scans all
// destinations or all deliveries. One held back by its rate waits in the
// paced list for the pace timer.
#pragma once

#include "qmgr/histogram.hpp"
#include "qmgr/queue.hpp"
#include "qmgr/routing.hpp"

#include "libsm/clock.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

struct SchedulerOptions {
    unsigned initial_concurrency = 5;
    unsigned max_concurrency = 20;
    std::chrono::microseconds dead_time{std::chrono::seconds(300)};
    unsigned max_rcpts_per_delivery = 100;
    unsigned link_max_inflight = 1000;  // DELIVERs outstanding per SMTPC
    // DELIVERs per destination per rate_interval; 0: no limit.
    unsigned rate_limit = 0;
    std::chrono::microseconds rate_interval{std::chrono::seconds(1)};
};

// Recipients of one transaction for one destination.
struct Job {
    Ta* ta = nullptr;
    std::vector<std::uint32_t> idx;
    // Connection-level failures this job was put back in its queue for (a
    // server refusing connections above its limit while others succeed).
    unsigned retries = 0;
    std::uint64_t sent_us = 0;  // its DELIVER went to SMTPC (complete() says)
};

class Scheduler {
public:
    // Recipients the scheduler will not try now because their destination is
    // dead; the owner defers them until until_us.
    using Suspend = std::function<void(Ta&, std::uint32_t idx, const smx::msg::Reply& why,
                                       std::uint64_t until_us)>;
    using Send = std::function<void(std::string frame)>;

    // Recipients change state only through queue (dispatch, requeue).
    Scheduler(asio::any_io_executor ex, ActiveQueue& queue, SchedulerOptions opt, Suspend suspend,
              const smx::Clock& clock = smx::system_clock());

    // Queues recipients of ta (all active) for one destination.
    void submit(Ta& ta, const Destination& dest, std::vector<std::uint32_t> idx);

    // Drops the waiting jobs of ta (its recipients left for DEFEDB or were
    // deleted) before its owner frees it. Walks every queue: rare.
    void forget(const Ta& ta);

    // SMTPC links. Removing one puts its in-flight deliveries back at the
    // front of their queues; they wait there while no link is connected.
    std::uint64_t add_link(Send send);
    void remove_link(std::uint64_t link);

    // A new rate limit (reload): applies to the next DELIVER of every
    // destination.
    void set_rate(unsigned limit, std::chrono::microseconds interval);
    // Cancels the pace timer (shutdown).
    void stop();

    // Takes the delivery a RESULT answers off the in-flight table and feeds
    // its outcome back into the window; error is the failure's reply.
    // nullopt when da_id is unknown or was sent on another link. After a
    // connection failure while the destination is still live, the job's
    // recipients go back to the front of its queue once (they are active
    // again, so the RESULT's handler skips them), unless retry is false (a
    // delivery QMGR reclaimed from a stuck SMTPC: not to be sent there again).
    std::optional<Job> complete(std::uint64_t link, std::uint64_t da_id,
                                bool connection_failed, const smx::msg::Reply& error,
                                bool retry = true);

    // Deliveries out longer than max_us at now_us, as (link, da_id): SMTPC
    // bounds every delivery itself, so these are lost in a stuck SMTPC.
    std::vector<std::pair<std::uint64_t, std::uint64_t>> overdue(std::uint64_t now_us,
                                                                 std::uint64_t max_us) const;

    std::size_t active_deliveries() const { return inflight_.size(); }
    std::size_t links() const { return links_.size(); }
    std::size_t destinations() const { return dests_.size(); }
    // Destinations suspended now (dead_time not over).
    std::size_t dead_destinations() const;
    // Recipients waiting or out for delivery per destination, the n largest.
    LabelCounts recipients_by_destination(std::size_t n) const;
    // Seconds from DELIVER to RESULT, per delivery attempt.
    const Histogram& delivery_seconds() const { return delivery_seconds_; }
    // Current window of a destination, 0 when it has no queue (for tests).
    double window(const std::string& key) const;
    bool dead(const std::string& key) const;

private:
    struct Dest {
        std::string key;
        const std::vector<std::string>* nexthops = nullptr;
        std::deque<Job> jobs;
        double window = 1;
        unsigned active = 0;
        double failed_cohorts = 0;
        std::uint64_t dead_until_us = 0;
        std::uint64_t next_send_us = 0;  // rate limit: no DELIVER before
        smx::msg::Reply last_error;
        bool ready = false;  // in ready_
        bool paced = false;  // in paced_
    };
    struct Link {
        std::uint64_t id = 0;
        Send send;
        unsigned inflight = 0;
    };
    struct Delivery {
        Job job;
        Dest* dest = nullptr;
        std::uint64_t link = 0;
        std::uint64_t sent_us = 0;
    };

    bool can_send(const Dest& d) const;
    void make_ready(Dest& d);
    void kick();
    void pump();
    void dispatch(Dest& d, Link& l, std::uint64_t now);
    void on_failure(Dest& d, const smx::msg::Reply& error);
    void retry_now(Dest& d, const Job& job);
    void pace(Dest& d);
    void release_paced();
    void revive_if_due(Dest& d, std::uint64_t now);
    void collect(Dest& d);
    Link* pick_link();
    Link* find_link(std::uint64_t id);

    asio::any_io_executor ex_;
    ActiveQueue& queue_;
    SchedulerOptions opt_;
    const smx::Clock& clock_;
    Suspend suspend_;
    std::unordered_map<std::string, std::unique_ptr<Dest>> dests_;
    std::deque<Dest*> ready_;
    std::vector<Dest*> paced_;
    asio::steady_timer pace_timer_;
    std::uint64_t pace_armed_us_ = 0;  // when pace_timer_ fires; 0: idle
    std::uint64_t spacing_us_ = 0;     // rate_interval / rate_limit
    std::vector<Link> links_;
    std::unordered_map<std::uint64_t, Delivery> inflight_;
    std::uint64_t next_link_ = 1;
    std::uint64_t next_da_ = 1;
    bool pump_posted_ = false;
    Histogram delivery_seconds_{delivery_buckets};
};

} // namespace smx::qmgr
