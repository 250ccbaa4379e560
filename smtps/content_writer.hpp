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

#include "smtps/segment_writer.hpp"

#include "libsm/space_account.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace smx::smtps {

namespace asio = boost::asio;

// Larger messages are written in pieces of this size on the event loop
// (page-cache writes); a message that never reached it goes to a content
// segment when the loop has one, else to disk in one write at commit.
inline constexpr std::size_t spill_size = 256 * 1024;

// Where content files go, the pool that syncs them, and the free-space reserve.
class ContentStore {
public:
    // content_dir: Config::content_dir_abs(). sync_names: also fsync a
    // file's directory after creating it (content_sync = "file" with the
    // IBDB on another file system, whose fdatasync then no longer commits
    // the new name with it).
    // segment_for: small messages go to content segments, each taking
    // messages for that long (0: a file each). reserve: queue.min_free_space.
    ContentStore(std::string content_dir, bool hashed, asio::thread_pool& pool,
                 std::uint64_t reserve = 0, bool sync_each = true, bool sync_names = false,
                 std::chrono::milliseconds segment_for = {})
        : content_(std::move(content_dir)), hashed_(hashed), pool_(pool),
          sync_each_(sync_each), sync_names_(sync_names), segment_for_(segment_for),
          space_(reserve, smx::SpaceAccount::measure(content_, content_)),
          recount_(std::make_shared<Recount>(&space_)) {}
    ~ContentStore();
    ContentStore(const ContentStore&) = delete;
    ContentStore& operator=(const ContentStore&) = delete;
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
    // At MAIL: false when a message of `size` bytes (a declared SIZE, or 0),
    // with the copy a segment's message needs when deferred, would leave
    // less than the reserve (queue.min_free_space) free on the content file
    // system (smx::SpaceAccount), so that a client hears 452 before it sends
    // its data. Any thread may call it, and claim().
    bool has_room(std::uint64_t size);
    // Before content is written: holds `now` bytes (and a later copy of
    // them) against the reserve until the claim ends; nullopt when they do
    // not fit.
    std::optional<smx::SpaceAccount::Claim> claim(std::uint64_t now, std::uint64_t copy);

private:
    // The segments are listed again on the pool when the last list is a
    // second old.
    void recount_if_due();

    std::string content_;
    bool hashed_;
    asio::thread_pool& pool_;
    bool sync_each_;
    bool sync_names_;
    std::chrono::milliseconds segment_for_;
    smx::SpaceAccount space_;
    // What a recount on the pool reaches the account through: the store
    // going away first waits for a recount under way and leaves later ones
    // nothing to count (a pool may outlive its store, or drop them unrun).
    struct Recount {
        explicit Recount(smx::SpaceAccount* s) : space(s) {}
        std::mutex m;
        smx::SpaceAccount* space;
    };
    std::shared_ptr<Recount> recount_;
};

// Content appended so far, read back (the milters read the message as
// stored, and their edits are written from it): the spilled part from the
// file, the rest from memory.
class ContentSource {
public:
    ContentSource() = default;
    ContentSource(int fd, std::uint64_t spilled, std::string_view tail)
        : fd_(fd), spilled_(spilled), tail_(tail) {}
    std::uint64_t size() const { return spilled_ + tail_.size(); }
    // Up to n bytes from offset into out (replacing it): false on a read
    // error (errno kept); out is empty at the end.
    bool read_at(std::uint64_t offset, std::size_t n, std::string& out) const;

private:
    int fd_ = -1;
    std::uint64_t spilled_ = 0;
    std::string_view tail_;
};

// What a writer held before take_content(): the spilled part's file under a
// .tmp name (remove_stale_tmp takes it after a crash), removed with this.
class TakenContent {
public:
    TakenContent() = default;
    TakenContent(int fd, std::string path, std::uint64_t spilled, std::string tail)
        : fd_(fd), path_(std::move(path)), spilled_(spilled), tail_(std::move(tail)) {}
    ~TakenContent();
    TakenContent(TakenContent&& o) noexcept
        : fd_(std::exchange(o.fd_, -1)), path_(std::move(o.path_)), spilled_(o.spilled_),
          tail_(std::move(o.tail_)) {}
    TakenContent& operator=(TakenContent&&) = delete;
    ContentSource source() const { return {fd_, spilled_, tail_}; }

private:
    int fd_ = -1;
    std::string path_;
    std::uint64_t spilled_ = 0;
    std::string tail_;
};

class ContentWriter {
public:
    // segment: the event loop's segment (null: a content file always).
    ContentWriter(ContentStore& store, std::string_view ta_id,
                  std::shared_ptr<SegmentWriter> segment);
    ~ContentWriter();
    ContentWriter(const ContentWriter&) = delete;
    ContentWriter& operator=(const ContentWriter&) = delete;

    // Buffers bytes; large messages are written out in big chunks. A write
    // error is kept and reported by commit().
    void append(std::string_view bytes);
    std::uint64_t size() const { return size_; }
    // What was appended, to read back before commit (valid until the next
    // append); empty after a write error (commit() reports it).
    ContentSource source() const {
        if (err_) return {};
        return {fd_, size_ - buf_.size(), buf_};
    }
    // Hands over what was appended and starts over empty under the same
    // name, so that an edited copy can be appended from it (milters).
    TakenContent take_content();
    // What names the content once commit() succeeded: the TA_COMMIT's content_id.
    const std::string& content_id() const { return content_id_; }

    // Writes the rest, fdatasyncs (content_sync = "file"), closes. Returns 0
    // or the errno of the first failure (the file is then removed).
    asio::awaitable<int> commit();
    // The reserve refused a part of it (commit() then says ENOSPC): nothing
    // of it stays on disk.
    bool short_of_space() const { return short_; }

    // Removes the committed file again (QMGR refused the transaction); a
    // segment record stays, unnamed, until its segment goes.
    void remove_committed();

private:
    const std::string& path();
    void spill();
    void refuse();
    asio::awaitable<int> commit_to_segment();

    ContentStore& store_;
    std::shared_ptr<SegmentWriter> segment_;
    std::string ta_id_, content_id_, path_;
    std::string buf_;
    std::uint64_t size_ = 0;
    int fd_ = -1;
    int err_ = 0;
    bool created_ = false;  // path_ is ours to remove (a spill created it)
    bool committed_ = false;
    bool short_ = false;
};

} // namespace smx::smtps
