// When the IBDB cuts a batch and commits it (docs/design.md, "Commit
// policy"). Pure decisions on the times it is told: ibdb.cpp owns the
// batches and the clock, tests/unit/qmgr feeds made-up times.
#pragma once

#include <chrono>
#include <optional>

namespace smx::qmgr {

class CommitPolicy {
public:
    using Clock = std::chrono::steady_clock;

    enum class Kind { adaptive, fixed };

    // fixed: every batch waits `interval` from its oldest transaction, and
    // for the write before it to be back.
    // adaptive: a batch goes once the device has had time to finish a
    // flush (k x the measured commit time since its oldest arrived), and
    // then as soon as arrivals pause; never later than `interval`. It goes
    // while the write before it is still out once that one has been out
    // for `interval` (a device that flushes slower than that).
    CommitPolicy(Kind kind, std::chrono::microseconds interval);

    // A transaction joined the queue.
    void arrived(Clock::time_point now);
    // A commit with transactions finished; `took` from its start to its end.
    void committed(Clock::duration took);
    // When the front batch, whose oldest transaction arrived at `oldest`,
    // should be written while no write is out.
    Clock::time_point due(Clock::time_point oldest) const;
    // When a batch that would go at `due` with no write out goes while one,
    // handed out at `out_started`, still is; nullopt: once it is back.
    std::optional<Clock::time_point> due_behind(Clock::time_point due,
                                                Clock::time_point out_started) const;

    // What the adaptive decision rests on (for tests and the log).
    Clock::duration commit_estimate() const { return commit_; }
    Clock::duration gap_estimate() const { return gap_; }

private:
    Kind kind_;
    Clock::duration interval_;
    Clock::time_point last_arrival_{};
    bool seen_arrival_ = false;
    Clock::duration gap_{0};     // moving average of the time between arrivals
    Clock::duration commit_{0};  // moving average of a commit's duration
};

} // namespace smx::qmgr
