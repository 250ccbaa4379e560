// The clock QMGR's components read: backoff, expiry (max_queue_lifetime),
// delay warnings and dead destinations all compare against now_us() from
// here, so unit tests can pass a clock they advance instead of waiting.
// Times are wall-clock microseconds since the epoch, as stored in IBDB and
// DEFEDB. now_us() may be called from pool threads.
#pragma once

#include "libsm/ids.hpp"

#include <cstdint>

namespace smx {

class Clock {
public:
    virtual ~Clock() = default;
    virtual std::uint64_t now_us() const = 0;
};

// The daemon's clock: the system's.
class SystemClock final : public Clock {
public:
    std::uint64_t now_us() const override { return smx::now_us(); }
};

// Microseconds from since_us to now_us; 0 when now_us is earlier (the wall
// clock stepped back since), never a difference wrapped round to centuries.
inline std::uint64_t elapsed_us(std::uint64_t since_us, std::uint64_t now_us) {
    return now_us > since_us ? now_us - since_us : 0;
}

inline const Clock& system_clock() {
    static const SystemClock clock;
    return clock;
}

} // namespace smx
