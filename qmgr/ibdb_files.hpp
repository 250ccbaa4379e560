// The IBDB's log files: which file holds which open transaction, which file
// is appended to and where, and when a file goes (once no open transaction
// is in it, and it is no longer appended to; the current one after an idle
// while with nothing open anywhere). Owner-side state only: the writes
// themselves are the commit pipeline's (ibdb_pipeline.hpp).
#pragma once

#include "qmgr/ibdb.hpp"
#include "qmgr/ibdb_record.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::qmgr::ibdb {

class LogFiles {
public:
    using Clock = std::chrono::steady_clock;

    // dir: the IBDB directory; sync: fsync it after a file goes (fsync on).
    LogFiles(std::string dir, bool sync, asio::thread_pool& workers, IbdbStats& stats);
    LogFiles(const LogFiles&) = delete;
    LogFiles& operator=(const LogFiles&) = delete;

    // Start-up: what read_log found. The transactions not done are open in
    // the files that hold them; files holding none go now.
    void recovered(const LogContents& log);

    // Transactions.
    bool holds(const std::string& ta_id) const { return tas_.count(ta_id) > 0; }
    bool empty() const { return tas_.empty(); }
    // A transaction whose record is on its way to a file (not placed yet).
    void logging(const std::string& ta_id, std::size_t rcpts);
    // Its record is in the current file / did not get there.
    void placed(const std::string& ta_id);
    void not_placed(const std::string& ta_id);
    // A recipient is final (done, or held by DEFEDB); false when the log
    // does not hold it. When every recipient is final with one in DEFEDB,
    // the transaction leaves the log.
    bool mark(const std::string& ta_id, std::uint32_t idx, RecType type);
    // ta_done: the transaction leaves the log; false when it held none.
    bool done(const std::string& ta_id);

    // The file appended to: its descriptor (-1: none yet), number, the end
    // of what was written, and the number a new one gets.
    int fd() const { return fd_; }
    std::uint32_t current() const { return cur_; }
    std::uint64_t end() const { return end_; }
    std::uint32_t next_number() const { return next_; }
    // A job created file `file` (fd): it is the current one now, and the
    // one before goes if nothing in it is open.
    void switched(std::uint32_t file, int fd);
    // Records were written up to `end` of the current file.
    void wrote(std::uint64_t end);
    // A write failed and could not be cut back: never append to the file again.
    void spoilt(std::uint64_t file_size) { end_ = std::max(end_, file_size); }
    Clock::time_point last_write() const { return last_write_; }
    // The current file goes (nothing open anywhere); now: on this thread.
    void retire(bool now);
    // At the end (the destructor): the current file is closed, or removed
    // when nothing is open.
    void close();

private:
    struct TaState {
        std::uint32_t file = 0;          // holds the transaction record; 0 = not written yet
        std::vector<std::uint8_t> rcpt;  // per recipient: 0 open, 1 done, 2 deferred
    };
    void leave(std::unordered_map<std::string, TaState>::iterator it);
    void maybe_delete(std::uint32_t f, bool now);
    void remove(const std::string& path, int fd, bool now);

    std::string dir_;
    bool sync_;
    asio::thread_pool& workers_;
    IbdbStats& stats_;
    std::unordered_map<std::string, TaState> tas_;  // every transaction in the log
    std::map<std::uint32_t, std::uint64_t> open_in_file_;  // live file -> open transactions
    int fd_ = -1;
    std::uint32_t cur_ = 0, next_ = 1;
    std::uint64_t end_ = 0;
    Clock::time_point last_write_ = Clock::now();
};

} // namespace smx::qmgr::ibdb
