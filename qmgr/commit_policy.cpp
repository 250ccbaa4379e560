#include "qmgr/commit_policy.hpp"

#include <algorithm>

namespace smx::qmgr {
namespace {

// Moving averages over about the last 8 samples: quick enough to follow a
// change of load, smooth enough that one odd gap does not decide.
CommitPolicy::Clock::duration smooth(CommitPolicy::Clock::duration avg, CommitPolicy::Clock::duration sample) {
    return avg + (sample - avg) / 8;
}

// A batch waits at least this many commit times from its oldest (what it
// would cost the next arrivals to need a flush of their own right behind
// it)...
constexpr int commit_times = 1;
// ...and then until no transaction has come for this many usual gaps between
// arrivals (the batch will not grow: its senders are all waiting for it).
constexpr int quiet_gaps = 2;

} // namespace

CommitPolicy::CommitPolicy(Kind kind, std::chrono::microseconds interval)
    : kind_(kind), interval_(interval) {}

void CommitPolicy::arrived(Clock::time_point now) {
    if (seen_arrival_) {
        // A pause longer than the ceiling says nothing about the next batch.
        gap_ = smooth(gap_, std::min<Clock::duration>(now - last_arrival_, interval_));
    }
    seen_arrival_ = true;
    last_arrival_ = now;
}

void CommitPolicy::committed(Clock::duration took) { commit_ = smooth(commit_, took); }

CommitPolicy::Clock::time_point CommitPolicy::due(Clock::time_point oldest) const {
    const auto ceiling = oldest + interval_;
    if (kind_ == Kind::fixed) return ceiling;
    const auto device = oldest + commit_times * commit_;
    const auto quiet = last_arrival_ + quiet_gaps * gap_;
    return std::min(ceiling, std::max(device, quiet));
}

std::optional<CommitPolicy::Clock::time_point> CommitPolicy::due_behind(
    Clock::time_point due, Clock::time_point out_started) const {
    if (kind_ == Kind::fixed) return std::nullopt;
    // A write out longer than the ceiling is on a device slower than it: a
    // batch waiting for that write would wait for the rest of its flush and
    // then for one of its own. Handed out now, its write and the writeback
    // of its content run while that flush does, and the device (the
    // journal) serves its flush right after. On a device faster than the
    // ceiling the write is back first and this never decides.
    return std::max(due, out_started + interval_);
}

} // namespace smx::qmgr
