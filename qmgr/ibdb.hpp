// IBDB: QMGR's append-only envelope log with group commit (docs/design.md).
//
// Files ibdb/NNNNNNNN.log; record = magic u32 | version u8 | type u8 |
// length u32 | crc32c u32 | payload. A transaction record holds the whole
// envelope; recipient-done, recipient-deferred and transaction-done records
// hold the id (and recipient index). Transaction records are acked only after
// the sync of the batch that holds them (fdatasync, or syncfs of the content
// file system, see IbdbOptions::content_dir); completion records ride along
// with the next write and need no fsync of their own (a lost one means a
// retried delivery, never a lost message).
#pragma once

#include "qmgr/commit_policy.hpp"
#include "qmgr/histogram.hpp"

#include "libsm/messages.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

struct IbdbOptions {
    std::string dir;  // Config::ibdb_dir_abs()
    std::string quarantine_dir;  // Config::quarantine_dir_abs()
    // adaptive: commit_interval is the ceiling of a batch's wait (commit_policy.hpp).
    CommitPolicy::Kind commit_policy = CommitPolicy::Kind::adaptive;
    std::chrono::microseconds commit_interval{1000};
    unsigned max_batch = 256;          // transactions per commit
    std::uint64_t file_size = 16u << 20;  // rotate after this many bytes
    bool fsync = true;
    // content_sync = "batch": the content directory (queue.content_dir),
    // whose file system each commit syncs (syncfs) before the batch is
    // acked, so that the content files SMTPS wrote without a sync are
    // durable with their envelopes. On the IBDB's own file system (same
    // st_dev) that one call covers the IBDB file too; on another, the IBDB
    // file is fdatasynced after it. Empty: SMTPS syncs each content file,
    // the commit syncs only the IBDB file.
    std::string content_dir;
    // Completion records with no transaction to ride along with are written
    // (without fsync) after this delay.
    std::chrono::milliseconds completion_delay{50};
    // When no transaction is open at all, the current file is closed and
    // deleted after this much idle time (an empty spool has no IBDB files).
    std::chrono::milliseconds idle_retire{1000};
};

struct IbdbStats {
    Histogram fsync_seconds{latency_buckets};  // per group commit
    Histogram batch_size{batch_buckets};       // transactions per group commit
    std::uint64_t commits = 0;          // syncs of batches with transactions
    std::uint64_t transactions = 0;     // transaction records committed
    std::uint64_t records = 0;          // all records written
    std::uint64_t files_deleted = 0;
    std::uint64_t fsync_us_total = 0;   // time spent in fdatasync/syncfs
    std::uint64_t fsync_us_max = 0;
    std::uint64_t corrupt_records = 0;  // seen during recovery
    std::uint64_t write_failures = 0;   // failed writes (a full disk), each retried later
};

// State of one transaction as rebuilt from the log at start-up.
struct RecoveredTa {
    smx::msg::TaCommit envelope;
    std::vector<bool> rcpt_done;      // per recipient index
    std::vector<bool> rcpt_deferred;  // moved to DEFEDB
};

class Ibdb {
public:
    // Completion callback, run on the owner's executor: ok=false when the
    // write or fdatasync failed (e.g. ENOSPC); the record is then not durable.
    using Durable = std::function<void(bool ok, const std::string& error)>;

    Ibdb(asio::any_io_executor owner, asio::thread_pool& workers, IbdbOptions opt);
    ~Ibdb();

    // Replays every live file in order (a torn last record is skipped; a
    // corrupt record is copied to quarantine with a log line) and returns the
    // transactions that are not done. Call once before the first append.
    // A transaction whose recipients are all done (crash before ta_done) is
    // returned so that QMGR can finish it; one whose recipients are all done
    // or deferred, with at least one deferred, is not (DEFEDB holds it).
    // Blocking: call at start-up, before the event loop runs.
    std::vector<RecoveredTa> recover();

    // on_durable runs after the fdatasync of the batch holding the record
    // (from the event loop, or inside flush_sync() and the destructor).
    // Completion calls for a transaction that is not in the log are ignored.
    // Call rcpt_deferred only once DEFEDB holds the recipient: when every
    // recipient is done or deferred the transaction leaves the IBDB.

    void append_transaction(const smx::msg::TaCommit& ta, Durable on_durable);
    // The same for a coroutine: resumes it (on its executor) with ok and
    // the error once the record is durable or failed.
    asio::awaitable<std::tuple<bool, std::string>> append(smx::msg::TaCommit ta);
    void rcpt_done(const std::string& ta_id, std::uint32_t idx);
    void rcpt_deferred(const std::string& ta_id, std::uint32_t idx);
    // written runs (on the owner's executor) once the ta_done record is
    // written, not synced: a crash of QMGR after that cannot bring the
    // transaction back. At once when the log no longer holds it.
    void ta_done(const std::string& ta_id, std::function<void()> written = {});
    // written runs (on the owner's executor) once every completion record
    // asked for so far is written (or its write failed, as for ta_done):
    // a crash of QMGR after that cannot bring back what they closed.
    void after_completions(std::function<void()> written);

    // Writes whatever is queued now (used at shutdown); returns when durable.
    // Blocks the calling thread; needs the worker pool still running if a
    // write is out. The destructor does the same, then closes the file (and
    // removes it when nothing is open).
    void flush_sync();

    const IbdbStats& stats() const { return stats_; }
    std::size_t pending() const;  // records waiting for the next batch

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    IbdbStats stats_;
};

} // namespace smx::qmgr
