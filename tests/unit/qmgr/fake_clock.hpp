// A clock the test moves: QMGR's components see time pass without the test
// waiting. Starts at the real time, so arrival times from smx::now_us() fit.
#pragma once

#include "libsm/clock.hpp"

#include <atomic>
#include <chrono>

class FakeClock final : public smx::Clock {
public:
    std::uint64_t now_us() const override { return now_.load(); }
    // A negative d steps it back, as an NTP correction may.
    void advance(std::chrono::microseconds d) { now_ += static_cast<std::uint64_t>(d.count()); }

private:
    std::atomic<std::uint64_t> now_{smx::now_us()};
};
