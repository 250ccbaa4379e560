// QMGR's side of the disk: the one owner of what intake may still take of
// each store's file system, and of the emergency reserve files.
//
// Intake (queue.min_free_space): one smx::SpaceAccount per file system among
// content_dir, ibdb_dir and the spool (DEFEDB, quarantine); the content's
// counts the content segments. At TA_COMMIT the content is on disk already
// (SMTPS wrote it after its own check); the TA_COMMIT must leave the reserve
// free on every one of them, and for a message in a segment the copy its
// first deferral makes besides. QMGR's own writes (IBDB records, DEFEDB,
// DSNs) are what the reserve is kept for.
//
// The emergency reserve: a file of reserve_file_size bytes, allocated with
// fallocate, in the DEFEDB directory and, when the IBDB lies on another file
// system, in ibdb_dir. A QMGR that starts where less than that is free gives
// it back before DEFEDB recovery (give_back_if_short), so that Berkeley DB
// recovery, and the IBDB after it, can write on a full disk. It is made
// again once the file system would still keep max(min_free_space, its size)
// free, counted as intake counts; until then its size counts against intake
// there, so that it comes back before new mail does.
#pragma once

#include "libsm/messages.hpp"

#include "libsm/config.hpp"
#include "libsm/space_account.hpp"

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace smx::qmgr {

// Measured (docs/design.md): Berkeley DB recovery after a kill -9 in a
// deferral storm took up to 1.2 MiB with 1 MiB log files written whole and
// a checkpoint every 2 MiB of log (defedb.cpp); the rest is for a new log
// file, the checkpoint after recovery and the IBDB's first writes.
inline constexpr std::uint64_t reserve_file_size = 4u << 20;
inline constexpr const char* reserve_file_name = "reserve";

class DiskSpace {
public:
    // Blocking (start-up): opens the accounts, makes missing reserve files
    // where there is room. The store directories exist.
    explicit DiskSpace(const smx::Config& cfg);
    DiskSpace(const DiskSpace&) = delete;
    DiskSpace& operator=(const DiskSpace&) = delete;

    // Start-up, before DEFEDB opens: gives back each reserve file on a file
    // system with less than its size free. Blocking; logs what it did.
    static void give_back_if_short(const smx::Config& cfg);

    // TA_COMMIT (event loop): empty when env fits, its copy then counted;
    // else the directory of the file system that is short.
    std::string admit(const smx::msg::TaCommit& env);

    // Once a second, on the pool: lists the segments again and makes
    // missing reserve files where there is room. Returns the file system
    // with the least room (short: intake refuses there), for the log.
    struct Fullest {
        std::string dir;
        std::uint64_t free = 0;
        bool short_of_space = false;
    };
    std::optional<Fullest> watch();

private:
    struct Fs {
        dev_t dev = 0;
        std::string dir;  // the first store on it, for log lines
        std::unique_ptr<smx::SpaceAccount> account;
        std::string reserve;  // its reserve file's path (none: empty)
        std::uint64_t owed = 0;  // the reserve file's size while it is missing
        int make_error = 0;  // the last failure to make it (logged once)
    };
    // Makes fs's reserve file when it is missing and fits; sets what it owes.
    void keep_reserve(Fs& fs);

    const std::uint64_t min_free_;
    std::vector<Fs> fs_;
    Fs* content_ = nullptr;
};

} // namespace smx::qmgr
