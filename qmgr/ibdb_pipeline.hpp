// The IBDB's commit pipeline: the jobs handed to the worker pool, in the
// order they went out. Each job is one batch's write. At most two are out
// (CommitPolicy::due_behind): they write in turn (the Lane), sync side by
// side, and their results are taken in order, so that a job is acked only
// when every job before it succeeded; a failure fails every job behind it.
// It owns the jobs, their states (the table below, checked on every step as
// ActiveQueue checks recipients) and the order; what a job's result means
// for the files and the batches is its owner's (ibdb.cpp).
//
//   queued  --turn-->    writing   (a worker, in the job's turn on the lane)
//   writing --wrote-->   syncing   (its records are in the file; a sync is due)
//   writing --finish-->  written   (nothing to sync)
//   syncing --finish-->  written
//   writing --error-->   failed    (create, write, or a job before it failed)
//   syncing --error-->   failed
//   written --ack-->     acked     (the owner, in order, nothing failed before)
//   written --refuse-->  refused   (the owner: a job before it failed)
//   failed  --refuse-->  refused
#pragma once

#include "qmgr/ibdb.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace smx::qmgr::ibdb {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

enum class JobState { queued, writing, syncing, written, failed, acked, refused };
enum class JobEvent { turn, wrote, finish, error, ack, refuse };
const char* to_string(JobState s);

// The order of the jobs that are out, on the worker side: each writes (or
// cuts the file back) only in its turn, right behind the one before. Once
// one failed and cut the file back to its start, no later job writes.
struct Lane {
    std::mutex m;
    std::condition_variable cv;
    std::uint64_t turn = 0;  // seq of the job that writes next
    bool cut = false;        // a job failed; the file ends at cut_off
    std::uint64_t cut_off = 0;
};

// One batch's write: what to write where, what to run after, and (set by
// the worker) how it went.
struct Job {
    std::string buf;  // transaction records, then completion records
    std::size_t done_from = 0;  // where the completion records start
    std::size_t records = 0, done_records = 0;
    std::vector<Ibdb::Durable> acks;
    std::vector<std::function<void()>> written;  // run once the completion records are written
    std::vector<std::string> ta_ids;
    std::string dir;
    int fd = -1;
    std::uint64_t off = 0;
    std::uint32_t file = 0;
    bool open_file = false;  // create `file` first and switch to it
    std::uint64_t seq = 0;   // its turn on the lane
    bool sync = false;
    bool no_sync = false;  // IbdbOptions::fsync off: not even the directory
    // content_sync = "batch": an fd of the content directory to syncfs, and
    // whether the IBDB lives on the same file system (then syncfs covers it).
    int content_fd = -1;
    bool ibdb_on_content_fs = false;
    Clock::time_point started{};  // on the owner, when it was handed to the workers
    // Results.
    bool opened = false;
    int err = 0;
    const char* op = "";
    bool truncate_failed = false;
    std::uint64_t fsync_us = 0;
    bool first_failure = false;  // set by the pipeline: the first of a chain of failures

    JobState state() const { return state_; }
    // The one way a job's state changes: a step the table above does not
    // have is a bug (smx::panic).
    void step(JobEvent ev);

private:
    JobState state_ = JobState::queued;
    friend class CommitPipeline;
    // Set by the worker when it is done; the owner waits for it in flush().
    std::mutex m_;
    std::condition_variable cv_;
    bool back_ = false;
};

// Worker side, the blocking part of one commit, in order: in its turn,
// create the file if asked and write the records; then sync the content
// file system and the log. Any error cuts the file back to where the job
// began (nothing of it, and nothing behind it, stays).
void run_commit(Job& j, Lane& lane);

class CommitPipeline {
public:
    // settle: the owner's part of a job that came back, in order (its
    // state acked, or refused with err saying why when it or a job before
    // it failed): returns the error its acks get ("" when acked). Its acks
    // and completion callbacks run after it; `next` after each turn of
    // results (the owner may start the next job).
    using Settle = std::function<std::string(Job& j)>;

    CommitPipeline(asio::any_io_executor owner, asio::thread_pool& workers, Settle settle,
                   std::function<void()> next);
    ~CommitPipeline();
    CommitPipeline(const CommitPipeline&) = delete;
    CommitPipeline& operator=(const CommitPipeline&) = delete;

    std::size_t out() const { return out_.size(); }
    const Job* last() const { return out_.empty() ? nullptr : out_.back().get(); }
    const Job* first() const { return out_.empty() ? nullptr : out_.front().get(); }
    bool failing() const { return chain_err_ != 0; }

    // written runs once the last job out is settled; false when none is out.
    bool after_last(std::function<void()>& written);
    // Numbers the job's turn and hands it to the workers; it is settled
    // after every job before it.
    void start(std::shared_ptr<Job> j);
    // On this thread: waits for the jobs out and settles them; then runs
    // each job `more` gives (until it gives none) right here.
    void flush(const std::function<std::shared_ptr<Job>()>& more);

private:
    void take_results();
    void take(const std::shared_ptr<Job>& j);

    asio::any_io_executor owner_;
    asio::thread_pool& workers_;
    Settle settle_;
    std::function<void()> next_;
    std::deque<std::shared_ptr<Job>> out_;  // handed to the workers, in order
    Lane lane_;
    std::uint64_t next_seq_ = 0;
    // A job out failed: every job behind it fails the same way.
    int chain_err_ = 0;
    const char* chain_op_ = "";
    std::shared_ptr<char> alive_ = std::make_shared<char>();  // for posted handlers
};

} // namespace smx::qmgr::ibdb
