// The free-space reserve ([queue] min_free_space) of one file system, kept as
// an exact account by SMTPS (before it writes content) and by QMGR (at
// TA_COMMIT), so that intake stops before the reserve is crossed rather than
// a sample's age later. The room a writer may use is
//
//     free space now (fstatvfs at every check: 0.4 us measured on ext4 and
//       tmpfs, less than keeping a sample fresh would cost in bookkeeping)
//   - bytes claimed and not yet written (by this process)
//   - the bytes of the content segments: a message kept in a segment is
//     copied to a content file of its own when it is first deferred, so its
//     size counts twice while its segment exists (listed at most once a
//     second; what this process added since is counted until the next list)
//   - bytes owed (QMGR: an emergency reserve file given back, not made again)
//
// and a write, with the copy it may need later, must leave the reserve.
// Other writers (the IBDB, DEFEDB, logs, anyone else) show up in the next
// fstatvfs; the reserve is what they have meanwhile.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace smx {

class SpaceAccount {
public:
    // What the account reads; nullopt: cannot tell now (free: no check).
    struct Gauges {
        std::function<std::optional<std::uint64_t>()> free;
        std::function<std::optional<std::uint64_t>()> segments;  // unset: none here
    };
    // Free space of dir's file system; with content_dir, the bytes of the
    // segment files under it (regular files only, links not followed).
    static Gauges measure(const std::string& dir, const std::string& content_dir = {});

    // reserve 0: no check, nothing is counted.
    SpaceAccount(std::uint64_t reserve, Gauges gauges);
    SpaceAccount(const SpaceAccount&) = delete;
    SpaceAccount& operator=(const SpaceAccount&) = delete;

    // Bytes about to be written (now) and a later copy of them (copy), held
    // against the room until the claim ends; written() before that moves the
    // copy into the segments' count (the bytes themselves are then in the
    // free space). Any thread; the account outlives its claims.
    class Claim {
    public:
        Claim() = default;
        Claim(Claim&& o) noexcept { *this = std::move(o); }
        Claim& operator=(Claim&& o) noexcept;
        ~Claim() { release(); }
        void written() { written_ = true; }

    private:
        friend class SpaceAccount;
        Claim(SpaceAccount* a, std::uint64_t now, std::uint64_t copy)
            : account_(a), now_(now), copy_(copy) {}
        void release();
        SpaceAccount* account_ = nullptr;
        std::uint64_t now_ = 0, copy_ = 0;
        bool written_ = false;
    };

    // Whether now + copy more bytes leave the reserve free.
    bool has_room(std::uint64_t now, std::uint64_t copy = 0);
    // The same, and holds them: nullopt when they do not fit.
    std::optional<Claim> claim(std::uint64_t now, std::uint64_t copy = 0);

    // Lists the segments again (a directory read: on a pool, never on an
    // event loop). One at a time; a call while one runs returns at once.
    void recount_segments();
    // True (to one caller) when the last list is a second old and none
    // runs: that caller then has recount_segments() run.
    bool recount_due();

    // QMGR: bytes this file system owes besides (a reserve file to make again).
    void set_owed(std::uint64_t bytes);
    // Free space less everything counted against it; nullopt when unknown.
    std::optional<std::uint64_t> room();
    // The file system's free space as it is (for log lines).
    std::optional<std::uint64_t> free() const { return gauges_.free ? gauges_.free() : std::nullopt; }
    std::uint64_t reserve() const { return reserve_; }

private:
    std::optional<std::uint64_t> room_locked();
    bool fits_locked(std::uint64_t now, std::uint64_t copy);

    const std::uint64_t reserve_;
    const Gauges gauges_;
    std::mutex mu_;
    std::uint64_t claimed_ = 0;         // claims held: now + copy
    std::uint64_t segments_ = 0;        // the last list
    std::uint64_t copies_written_ = 0;  // written() claims' copies since that list began
    std::uint64_t owed_ = 0;
    bool recounting_ = false;
    std::chrono::steady_clock::time_point listed_{};
};

} // namespace smx
