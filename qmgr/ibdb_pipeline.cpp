#include "qmgr/ibdb_pipeline.hpp"

#include "qmgr/ibdb_record.hpp"

#include "libsm/content_file.hpp"
#include "libsm/panic.hpp"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

#include <iterator>
#include <string>
#include <utility>

namespace smx::qmgr::ibdb {
namespace {

struct Edge {
    JobState from;
    JobEvent ev;
    JobState to;
};

using S = JobState;
using E = JobEvent;
constexpr Edge edges[] = {
    {S::queued, E::turn, S::writing},    {S::writing, E::wrote, S::syncing},
    {S::writing, E::finish, S::written}, {S::syncing, E::finish, S::written},
    {S::writing, E::error, S::failed},   {S::syncing, E::error, S::failed},
    {S::written, E::ack, S::acked},      {S::written, E::refuse, S::refused},
    {S::failed, E::refuse, S::refused},
};

const char* event_name(JobEvent ev) {
    switch (ev) {
    case E::turn: return "turn";
    case E::wrote: return "wrote";
    case E::finish: return "finish";
    case E::error: return "error";
    case E::ack: return "ack";
    case E::refuse: return "refuse";
    }
    return "?";
}

bool pwrite_all(int fd, const std::string& buf, std::uint64_t off) {
    std::size_t done = 0;
    while (done < buf.size()) {
        ssize_t n = ::pwrite(fd, buf.data() + done, buf.size() - done,
                             static_cast<off_t>(off + done));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        done += static_cast<std::size_t>(n);
    }
    return true;
}

// Under the lane's lock: cuts the file back to where j's write started, so
// that no half record, and nothing of a job behind it, stays in front of
// the next batch. Never extends it again past an earlier cut.
void cut_back(Job& j, Lane& lane) {
    if (lane.cut && lane.cut_off <= j.off) return;
    lane.cut = true;
    lane.cut_off = j.off;
    while (::ftruncate(j.fd, static_cast<off_t>(j.off)) != 0) {
        if (errno == EINTR) continue;
        j.truncate_failed = true;
        break;
    }
}

// Under the lane's lock, in j's turn: creates the file if asked and appends
// j's records. True when the file may hold part of them.
bool write_records(Job& j, const Lane& lane) {
    if (lane.cut) {
        // A job before this one failed and cut the file back: writing
        // behind the cut would leave a hole in front of these records.
        j.err = ECANCELED;
        j.op = "write (behind a failed one) of";
        return false;
    }
    if (j.open_file) {
        std::string path = j.dir + "/" + file_name(j.file);
        // O_EXCL: the number is past every file recover() saw; never clobber.
        int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            j.err = errno;
            j.op = "create";
            return false;
        }
        // fdatasync of the file does not make its directory entry durable;
        // a syncfs of its file system (before any ack) does.
        const bool syncfs_covers = j.content_fd >= 0 && j.ibdb_on_content_fs;
        if (int e = syncfs_covers || j.no_sync ? 0 : smx::content::sync_dir(j.dir)) {
            ::close(fd);
            ::unlink(path.c_str());
            j.err = e;
            j.op = "fsync directory for";
            return false;
        }
        if (j.fd >= 0) ::close(j.fd);
        j.fd = fd;
        j.off = 0;
        j.opened = true;
    }
    if (!pwrite_all(j.fd, j.buf, j.off)) {
        j.err = errno;
        j.op = "write";
    }
    return true;
}

// Content first: an envelope must never be durable without its content.
// syncfs reports writeback errors since Linux 5.8 (per fd: each one once),
// so a content file that failed to reach the disk fails this batch.
void sync_records(Job& j) {
    const auto t0 = Clock::now();
    if (j.content_fd >= 0 && ::syncfs(j.content_fd) != 0) {
        j.err = errno;
        j.op = "syncfs content directory for";
    } else if ((j.content_fd < 0 || !j.ibdb_on_content_fs) && ::fdatasync(j.fd) != 0) {
        j.err = errno;
        j.op = "fdatasync";
    }
    j.fsync_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
}

} // namespace

const char* to_string(JobState s) {
    switch (s) {
    case S::queued: return "queued";
    case S::writing: return "writing";
    case S::syncing: return "syncing";
    case S::written: return "written";
    case S::failed: return "failed";
    case S::acked: return "acked";
    case S::refused: return "refused";
    }
    return "?";
}

void Job::step(JobEvent ev) {
    for (const auto& e : edges) {
        if (e.from == state_ && e.ev == ev) {
            state_ = e.to;
            return;
        }
    }
    smx::panic(std::string("ibdb: job ") + std::to_string(seq) + ": " + event_name(ev) +
              " in state " + to_string(state_));
}

void run_commit(Job& j, Lane& lane) {
    {
        std::unique_lock lock(lane.m);
        lane.cv.wait(lock, [&] { return lane.turn == j.seq; });
        j.step(JobEvent::turn);
        const bool touched = write_records(j, lane);
        if (j.err != 0 && touched) cut_back(j, lane);
        ++lane.turn;
    }
    lane.cv.notify_all();
    if (j.err != 0) return j.step(JobEvent::error);
    if (!j.sync) return j.step(JobEvent::finish);
    j.step(JobEvent::wrote);
    sync_records(j);
    if (j.err == 0) return j.step(JobEvent::finish);
    {
        std::lock_guard lock(lane.m);
        cut_back(j, lane);
    }
    j.step(JobEvent::error);
}

CommitPipeline::CommitPipeline(asio::any_io_executor owner, asio::thread_pool& workers,
                               Settle settle, std::function<void()> next)
    : owner_(std::move(owner)), workers_(workers), settle_(std::move(settle)),
      next_(std::move(next)) {}

CommitPipeline::~CommitPipeline() {
    // A worker still out would use the lane after it is gone.
    if (!out_.empty()) smx::panic("ibdb: commit pipeline destroyed with writes out");
}

bool CommitPipeline::after_last(std::function<void()>& written) {
    if (out_.empty()) return false;
    out_.back()->written.push_back(std::move(written));
    return true;
}

void CommitPipeline::start(std::shared_ptr<Job> j) {
    j->seq = next_seq_++;
    out_.push_back(j);
    asio::post(workers_, [j, this, w = std::weak_ptr<char>(alive_), ex = owner_] {
        run_commit(*j, lane_);
        {
            std::lock_guard lock(j->m_);
            j->back_ = true;
        }
        j->cv_.notify_all();
        asio::post(ex, [w, this] {
            if (w.lock()) take_results();
        });
    });
}

// The results of the jobs that are back, in the order they went out.
void CommitPipeline::take_results() {
    while (!out_.empty()) {
        auto j = out_.front();
        {
            std::lock_guard lock(j->m_);
            if (!j->back_) break;
        }
        out_.pop_front();
        take(j);
    }
    next_();
}

void CommitPipeline::take(const std::shared_ptr<Job>& j) {
    // Behind a failed job this one fails too, whatever it found: the file
    // was cut back in front of its records, or a writeback error both
    // syncs waited for was reported to the other one only.
    if (chain_err_ != 0 && j->err == 0) {
        j->err = chain_err_;
        j->op = chain_op_;
    }
    if (j->err != 0 && chain_err_ == 0) {
        chain_err_ = j->err;
        chain_op_ = j->op;
        j->first_failure = true;
    }
    j->step(j->err == 0 ? JobEvent::ack : JobEvent::refuse);
    const std::string error = settle_(*j);
    if (out_.empty() && chain_err_ != 0) {  // the failed ones are all back
        chain_err_ = 0;
        std::lock_guard lock(lane_.m);
        lane_.cut = false;
    }
    for (auto& cb : j->acks) cb(j->err == 0, error);
    for (auto& cb : j->written) cb();
}

void CommitPipeline::flush(const std::function<std::shared_ptr<Job>()>& more) {
    for (;;) {
        if (!out_.empty()) {
            auto j = out_.front();
            std::unique_lock lock(j->m_);
            j->cv_.wait(lock, [&] { return j->back_; });
            lock.unlock();
            out_.pop_front();
            take(j);
        } else if (auto n = more()) {
            n->seq = next_seq_++;
            out_.push_back(n);
            run_commit(*n, lane_);
            n->back_ = true;
        } else {
            break;
        }
    }
}

} // namespace smx::qmgr::ibdb
