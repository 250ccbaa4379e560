// The commit policy's decisions on made-up times (no clock, no files).
#include "qmgr/commit_policy.hpp"

#include <catch2/catch.hpp>

using namespace smx::qmgr;
using namespace std::chrono_literals;
using Kind = CommitPolicy::Kind;
using T = CommitPolicy::Clock::time_point;

namespace {
const T t0 = T{} + 1000s;

// Arrivals every `gap` from t0; returns the time of the last.
T arrive(CommitPolicy& p, int n, CommitPolicy::Clock::duration gap, T from = t0) {
    T t = from;
    for (int i = 0; i < n; ++i) {
        t = from + i * gap;
        p.arrived(t);
    }
    return t;
}
} // namespace

TEST_CASE("fixed: every batch waits the interval from its oldest", "[commit_policy]") {
    CommitPolicy p(Kind::fixed, 1000us);
    CHECK(p.due(t0) == t0 + 1000us);
    arrive(p, 50, 10us);
    p.committed(5ms);
    CHECK(p.due(t0) == t0 + 1000us);
}

TEST_CASE("adaptive: with no history a transaction goes at once", "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 5000us);
    p.arrived(t0);
    CHECK(p.due(t0) == t0);
}

TEST_CASE("adaptive: waits while arrivals keep coming, never past the ceiling", "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 5000us);
    T last = arrive(p, 200, 100us);  // a steady stream, one every 100 us
    CHECK(p.gap_estimate() > 90us);
    CHECK(p.gap_estimate() <= 100us);
    // The batch that started at `last` waits for the next arrivals (due
    // about two gaps after the latest one)...
    T due = p.due(last);
    CHECK(due > last + 150us);
    CHECK(due <= last + 200us);
    // ...and each one that comes in time moves it on...
    for (int i = 1; i <= 10; ++i) p.arrived(last + i * 100us);
    CHECK(p.due(last) > last + 1000us);
    // ...but not beyond the ceiling from the oldest.
    for (int i = 11; i <= 100; ++i) p.arrived(last + i * 100us);
    CHECK(p.due(last) == last + 5000us);
}

TEST_CASE("adaptive: when arrivals pause the batch goes", "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 5000us);
    T last = arrive(p, 200, 100us);
    // Oldest of the batch at `last`; nothing came after: due two gaps later,
    // long before the ceiling.
    T due = p.due(last);
    CHECK(due < last + 5000us);
    CHECK(due - last == 2 * p.gap_estimate());
}

TEST_CASE("adaptive: a slow device makes the batch wait for about one commit time", "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 10000us);
    for (int i = 0; i < 50; ++i) p.committed(3ms);  // flushes of about 3 ms
    CHECK(p.commit_estimate() > 2900us);
    T last = arrive(p, 200, 100us);
    // Arrivals pause at once, yet the batch waits until a commit time has
    // passed since its oldest: the ones arriving meanwhile would otherwise
    // need a flush of their own right behind it.
    CHECK(p.due(last) == last + p.commit_estimate());
    // A batch already that old (it formed while the previous commit was
    // out) goes once arrivals pause, or at its ceiling if that is earlier.
    CHECK(p.due(last - 4ms) == last + 2 * p.gap_estimate());
    CHECK(p.due(last - 9950us) == last + 50us);
}

TEST_CASE("adaptive: a long pause does not count as the usual gap", "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 2000us);
    T last = arrive(p, 100, 50us);
    p.arrived(last + 60s);
    CHECK(p.gap_estimate() <= 2000us);
}

TEST_CASE("fixed: a batch never goes while a write is out", "[commit_policy]") {
    CommitPolicy p(Kind::fixed, 1000us);
    CHECK_FALSE(p.due_behind(t0, t0 - 10s).has_value());
}

TEST_CASE("adaptive: behind a write out, a batch goes once that write has been out for the ceiling",
          "[commit_policy]") {
    CommitPolicy p(Kind::adaptive, 1000us);
    // The write went out at t0: a batch due earlier waits for the ceiling...
    CHECK(p.due_behind(t0 + 200us, t0) == t0 + 1000us);
    // ...one due later goes when due: the write out is slow by then.
    CHECK(p.due_behind(t0 + 1500us, t0) == t0 + 1500us);
    // A write out long ago (a slow device): at once when due.
    CHECK(p.due_behind(t0, t0 - 3ms) == t0);
}
