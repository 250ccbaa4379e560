// DEFEDB: the deferred envelope DB, a Berkeley DB 5.3 transactional
// environment under <spool>/defedb (docs/design.md).
//
// A recipient enters DEFEDB the first time it is deferred; the IBDB records
// the move only after put_deferred()/put_many() has returned, i.e. after the
// DEFEDB commit is on disk. Three B-trees:
//   envelopes.db  ta-id → version u8 | smx::msg::envelope_bytes(TaCommit)
//   rcpts.db      ta-id | u32 BE idx → version u8 | recipient record
//   next_try.db   secondary index of rcpts.db: u64 BE next_try | ta-id | idx,
//                 so a cursor walks recipients in due order; held recipients
//                 are not indexed at all (DB_DONOTINDEX).
// Nothing is loaded into memory at open: due() and next_due_time() read the
// head of the index, so start-up time does not grow with the queue.
//
// Every call blocks (disk I/O, fsync) and is thread-safe: QMGR calls them on
// its worker pool, never on the event loop. Deadlocks between concurrent
// calls are detected by Berkeley DB and retried here. A database failure
// (I/O error, a panicked environment) throws DefedbError; fatal() means the
// environment must be reopened (recovery runs at open), so QMGR should exit
// and let the MCP restart it.
#pragma once

#include "libsm/messages.hpp"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace smx::qmgr {

class DefedbError : public std::runtime_error {
public:
    DefedbError(const std::string& what, bool fatal) : std::runtime_error(what), fatal_(fatal) {}
    bool fatal() const { return fatal_; }

private:
    bool fatal_;
};

struct DeferredRcpt {
    std::string ta_id;
    std::uint32_t idx = 0;
    std::string addr;
    std::uint32_t attempts = 0;
    std::uint64_t first_arrival_us = 0;  // the transaction's arrival
    std::uint64_t last_attempt_us = 0;
    std::uint64_t next_try_us = 0;
    smx::msg::Reply last_reply;  // e.g. {451, "4.3.0", "try later"}, or {0, "4.4.1", "connect to ..."}
    std::string last_relay;     // the server that gave it; empty when none replied
    bool held = false;
    bool warned = false;  // its sender got the delay warning
    bool operator==(const DeferredRcpt&) const = default;
};

// Recipients of one transaction with its envelope.
struct DeferredTa {
    smx::msg::TaCommit envelope;
    std::vector<DeferredRcpt> rcpts;
};

class Defedb {
public:
    Defedb();
    ~Defedb();  // checkpoints and closes
    Defedb(const Defedb&) = delete;
    Defedb& operator=(const Defedb&) = delete;

    // Opens (creating) the environment in dir and runs normal recovery;
    // nothing else may be called before it has succeeded.
    // quarantine_dir (may be empty) receives records that fail to decode.
    // False with a message naming the directory when the environment or a
    // database is corrupt or unreadable.
    bool open(const std::string& dir, const std::string& quarantine_dir, std::string& err);
    void close();
    // queue.test_no_sync (test builds): put_many commits without a log flush.
    void set_no_sync() { no_sync_ = true; }

    // Stores recipients of one or more transactions in one durable
    // transaction (one fsync for the whole batch). The envelope is written
    // once per ta-id; a recipient already present is overwritten (a replay
    // of the IBDB after a crash may defer it again).
    void put_many(const std::vector<DeferredTa>& batch);
    void put_deferred(const smx::msg::TaCommit& envelope, const DeferredRcpt& rcpt);

    // After another failed attempt: stores attempts, last_attempt_us,
    // next_try_us, last_reply and last_relay of r, and sets warned if r has it; address,
    // first arrival and the held flag stay as stored (an operator may have
    // held it meanwhile). False when the recipient is not in DEFEDB.
    bool update(const DeferredRcpt& r);

    // Final result (delivered or bounced): deletes the recipient, and the
    // envelope with the last one. False when it was not there.
    bool remove(const std::string& ta_id, std::uint32_t idx);
    // `smx delete`: every recipient and the envelope; returns recipients removed.
    std::size_t remove_ta(const std::string& ta_id);
    // True while any recipient of ta_id is stored (its envelope is there).
    bool has_ta(const std::string& ta_id);

    // At most `limit` recipients, not held, with next_try <= now_us, in due
    // order, grouped by transaction (in order of their first due recipient).
    // With lease_until_us > 0 their next_try moves to lease_until_us in the
    // same transaction: the next call does not return them again while they
    // are being delivered, and after a crash they come back at that time.
    std::vector<DeferredTa> due(std::uint64_t now_us, std::size_t limit,
                                std::uint64_t lease_until_us = 0);
    // Earliest next_try of a recipient that is not held, for QMGR's timer.
    std::optional<std::uint64_t> next_due_time();

    // `smx queue`: every transaction with all its recipients, in ta-id
    // (= arrival) order. Reads in chunks, each its own short transaction, and
    // calls f outside any transaction.
    void for_each(const std::function<void(const DeferredTa&)>& f);
    // `smx show`: one transaction with its recipients; nullopt when DEFEDB
    // holds none of it.
    std::optional<DeferredTa> get(const std::string& ta_id);

    // `smx hold` / `smx release`: returns the recipients of ta_id (0 = not
    // in DEFEDB). A released recipient keeps its next try.
    std::size_t set_held(const std::string& ta_id, bool held);
    // `smx flush` (and `smx requeue` with pick): next try = now_us for every
    // recipient not held (that pick accepts); returns how many moved.
    std::size_t flush_all(std::uint64_t now_us,
                          const std::function<bool(const DeferredRcpt&)>& pick = {});

    // Recipients in DEFEDB. The first call counts the keys (about 80 ms for
    // 100,000 recipients), later calls are free.
    std::uint64_t count();

    // Writes a checkpoint and lets Berkeley DB remove log files it no longer
    // needs (DB_LOG_AUTO_REMOVE). QMGR calls it about once a minute.
    void checkpoint();

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
    bool no_sync_ = false;
};

} // namespace smx::qmgr
