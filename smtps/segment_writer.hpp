// The content segment of one event loop (libsm/content_segment.hpp): the
// loop reserves each small message's place in it; the file is made on a
// pool thread by the first write, and later records are written on the loop
// (smtps/content_writer.cpp says why). A
// segment is used for [queue] segment_age / 6 or up to segment_max_size,
// then the next one starts; QMGR removes old ones once nothing names them.
#pragma once

#include <boost/asio.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace smx::smtps {

namespace asio = boost::asio;

// One segment file, shared by the writes into it (on pool threads) and the
// writer that hands out places; closed when the last of them lets go.
class SegmentFile {
public:
    SegmentFile(std::string content_dir, bool sync_name);
    ~SegmentFile();
    SegmentFile(const SegmentFile&) = delete;
    SegmentFile& operator=(const SegmentFile&) = delete;

    const std::string& id() const { return id_; }
    // The descriptor, the file made on the first call (any thread; with
    // sync_name its directory is synced then); or -errno.
    int fd();
    // The descriptor once a call of fd() has made the file, else -1: never
    // waits for the disk (any thread).
    int made_fd() const { return made_fd_.load(std::memory_order_acquire); }
    // Making it failed (seen on the loop: the next message starts a new one).
    bool failed() const { return failed_; }

private:
    std::string id_, dir_, path_;
    bool sync_name_;
    std::once_flag made_;
    int fd_ = -1;
    std::atomic<int> made_fd_ = -1;
    std::atomic<bool> failed_ = false;
};

class SegmentWriter {
public:
    // sync_name: as smx::content::sync_names(cfg); a segment takes messages
    // for append_for, and is let go then even if no message comes to start
    // the next (QMGR removes it later: an open descriptor would keep its
    // space); ex: the event loop's.
    SegmentWriter(asio::any_io_executor ex, std::string content_dir, bool sync_name,
                  std::chrono::milliseconds append_for)
        : content_(std::move(content_dir)), sync_name_(sync_name), append_for_(append_for),
          retire_(std::move(ex)) {}

    struct Place {
        std::shared_ptr<SegmentFile> file;
        std::uint64_t offset = 0;
    };
    // A place for a record of `bytes` (header included); event loop only.
    Place reserve(std::uint64_t bytes);

private:
    std::string content_;
    bool sync_name_;
    std::chrono::milliseconds append_for_;
    std::shared_ptr<SegmentFile> cur_;
    std::uint64_t used_ = 0;
    std::chrono::steady_clock::time_point started_{};
    asio::steady_timer retire_;  // lets cur_ go once its time is up
};

} // namespace smx::smtps
