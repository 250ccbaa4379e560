// The sessions of each smx-smtps process when `smx run` runs several
// (server.processes): one shared page, made by the MCP as a memfd and mapped
// by every smx-smtps, so that max_connections holds for all of them
// together. Each process writes only its own slot; the MCP clears the slot
// of one that died, before it starts the next (which starts from 0 too).
// Two processes admitting at the same instant may each see the other's old
// count: the total can pass max_connections by at most processes - 1.
#pragma once

#include "libsm/config.hpp"

#include <atomic>
#include <cstdint>
#include <string>

namespace smx {

class SessionCounts {
public:
    // MCP: the memfd (close-on-exec, zeroed); -1 with err.
    static int create(std::string& err);
    // Maps fd; throws std::runtime_error when it is not a counts memfd.
    explicit SessionCounts(int fd);
    ~SessionCounts();
    SessionCounts(const SessionCounts&) = delete;
    SessionCounts& operator=(const SessionCounts&) = delete;

    // slot < max_smtps_processes (else panic).
    void set(unsigned slot, std::uint64_t sessions);
    // The others' sessions, without slot's.
    std::uint64_t others(unsigned slot) const;

private:
    struct alignas(64) Slot {
        std::atomic<std::uint64_t> sessions;
    };
    static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
                  "shared between processes: must not need a lock");
    static constexpr std::size_t bytes = sizeof(Slot) * max_smtps_processes;
    Slot* slots_ = nullptr;
};

} // namespace smx
