// Writes each transaction's content: a small message (one never spilled to
// disk while it came in) as a record in the event loop's content segment
// (queue.content_segments, libsm/content_segment.hpp), any other as a
// content file of its own. The message is buffered in
// memory and written under its final name (no temporary name and rename:
// nothing reads the file before TA_COMMIT names it, which follows the
// close, and a file left by a crash has no envelope, so the orphan sweep
// takes it). Creating a file, its final write and the fdatasync
// (queue.content_sync = "file" only) run on a worker pool so that the event
// loop never waits for the disk: even without a sync, creating a file can
// wait for a journal commit (done inline they halved throughput). Only a
// record appended to a segment that exists is written on the loop. With "batch" (the default) QMGR's
// group commit makes the file durable with the batch that holds its
// envelope, before the ack. Anything not committed is unlinked.
#pragma once

#include "segment_writer.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace smtps {

namespace asio = boost::asio;

// Where CDB files go, the pool that syncs them, and the free-space reserve.
class CdbStore {
public:
    // content_dir: Config::content_dir_abs(). sync_names: also fsync a
    // file's directory after the rename (content_sync = "file" with the
    // IBDB on another file system, whose fdatasync then no longer commits
    // the rename with it).
    // segment_for: small messages go to content segments, each taking
    // messages for that long (0: a file each).
    CdbStore(std::string content_dir, bool hashed, asio::thread_pool& pool,
             std::uint64_t reserve = 0, bool sync_each = true, bool sync_names = false,
             std::chrono::milliseconds segment_for = {})
        : content_(std::move(content_dir)), hashed_(hashed), pool_(pool), reserve_(reserve),
          sync_each_(sync_each), sync_names_(sync_names), segment_for_(segment_for) {}
    const std::string& content_dir() const { return content_; }
    std::chrono::milliseconds segment_for() const { return segment_for_; }
    std::string path_for(std::string_view ta_id) const;
    // Removes the <id>.tmp files of a writer killed mid-write (QMGR's DSNs
    // are written that way; SMTPS writes under the final name); call at
    // start-up before any session runs (there is one SMTPS per spool).
    // Returns how many it removed.
    std::size_t remove_stale_tmp() const;
    asio::thread_pool& pool() const { return pool_; }
    // True when each file is fdatasynced here (content_sync = "file").
    bool sync_each() const { return sync_each_; }
    bool sync_names() const { return sync_names_; }
    // False when a message of `size` bytes would leave less than the reserve
    // (queue.min_free_space) free on the content file system, with postfix's margin of 1.5
    // times the declared SIZE; so that a client hears 452 at MAIL rather
    // than after sending all its data. Free space is sampled at most once a
    // second; reserve 0 or a failing statvfs never refuse (QMGR checks too).
    // Any thread may call it.
    bool has_room(std::uint64_t size);

private:
    std::string content_;
    bool hashed_;
    asio::thread_pool& pool_;
    std::uint64_t reserve_;
    std::mutex sample_mu_;  // guards free_ and sampled_
    bool sync_each_;
    bool sync_names_;
    std::chrono::milliseconds segment_for_;
    std::uint64_t free_ = 0;
    std::chrono::steady_clock::time_point sampled_{};
};

class CdbWriter {
public:
    // segment: the event loop's segment (null: a content file always).
    CdbWriter(const CdbStore& store, std::string_view ta_id,
              std::shared_ptr<SegmentWriter> segment);
    ~CdbWriter();
    CdbWriter(const CdbWriter&) = delete;
    CdbWriter& operator=(const CdbWriter&) = delete;

    // Buffers bytes; large messages are written out in big chunks. A write
    // error is kept and reported by commit().
    void append(std::string_view bytes);
    std::uint64_t size() const { return size_; }
    // What names the content once commit() succeeded: the TA_COMMIT's cdb_id.
    const std::string& cdb_id() const { return cdb_id_; }

    // Writes the rest, fdatasyncs (content_sync = "file"), closes. Returns 0
    // or the errno of the first failure (the file is then removed).
    asio::awaitable<int> commit();

    // Removes the committed file again (QMGR refused the transaction); a
    // segment record stays, unnamed, until its segment goes.
    void remove_committed();

private:
    const std::string& path();
    void spill();
    asio::awaitable<int> commit_to_segment();

    const CdbStore& store_;
    std::shared_ptr<SegmentWriter> segment_;
    std::string ta_id_, cdb_id_, path_;
    std::string buf_;
    std::uint64_t size_ = 0;
    int fd_ = -1;
    int err_ = 0;
    bool created_ = false;  // path_ is ours to remove (a spill created it)
    bool committed_ = false;
};

} // namespace smtps
