// IBDB group commit. All state lives on the owner's (QMGR's) executor; the
// blocking part of a write (create, write, sync, truncate back) runs as
// a Job on the worker pool and its result is posted back. At most two jobs
// are out (CommitPolicy::due_behind): they write in turn (Lane), sync side
// by side, and the owner takes their results in order, so that a job is
// acked only when every job before it succeeded. While a job is out the
// owner does not touch the file descriptor.
#include "ibdb.hpp"

#include "ibdb_record.hpp"

#include "panic.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <fcntl.h>
#include <filesystem>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>
#include <utility>

namespace smx::qmgr {
namespace {

using Clock = std::chrono::steady_clock;

// The order of the jobs that are out, on the worker side: each writes (or
// cuts the file back) only in its turn, right behind the one before. Once
// one failed and cut the file back to its start, no later job writes: the
// owner fails them all (Impl::finish) and then reopens the lane.
struct Lane {
    std::mutex m;
    std::condition_variable cv;
    std::uint64_t turn = 0;  // seq of the job that writes next
    bool cut = false;        // a job failed; the file ends at cut_off
    std::uint64_t cut_off = 0;
};

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
    std::uint64_t seq = 0;  // its turn on the lane
    bool sync = false;
    bool no_sync = false;  // IbdbOptions::fsync off: not even the directory
    // content_sync = "batch": an fd of the content directory to syncfs, and
    // whether the IBDB lives on the same file system (then syncfs covers it).
    int content_fd = -1;
    bool ibdb_on_content_fs = false;
    // Results.
    bool opened = false;
    int err = 0;
    const char* op = "";
    bool truncate_failed = false;
    std::uint64_t fsync_us = 0;
    Clock::time_point started{};  // on the owner, when it was handed to the workers
    // Set by the worker when done; flush_sync() waits for it.
    std::mutex m;
    std::condition_variable cv;
    bool finished = false;
};

int fsync_dir(const std::string& dir) {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno;
    int err = ::fsync(fd) == 0 ? 0 : errno;
    ::close(fd);
    return err;
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

// Worker side, under the lane's lock in j's turn: creates the file if asked
// and appends j's records. True when the file may hold part of them.
bool write_records(Job& j, const Lane& lane) {
    if (lane.cut) {
        // A job before this one failed and cut the file back: writing
        // behind the cut would leave a hole in front of these records.
        j.err = ECANCELED;
        j.op = "write (behind a failed one) of";
        return false;
    }
    if (j.open_file) {
        std::string path = j.dir + "/" + ibdb::file_name(j.file);
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
        if (int e = syncfs_covers || j.no_sync ? 0 : fsync_dir(j.dir)) {
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

// Worker side.
void run_job(Job& j, Lane& lane) {
    {
        std::unique_lock lock(lane.m);
        lane.cv.wait(lock, [&] { return lane.turn == j.seq; });
        if (write_records(j, lane) && j.err != 0) cut_back(j, lane);
        ++lane.turn;
    }
    lane.cv.notify_all();
    if (j.err == 0 && j.sync) {
        auto t0 = Clock::now();
        // Content first: an envelope must never be durable without its
        // content. syncfs reports writeback errors since Linux 5.8 (per fd:
        // each one once), so a content file that failed to reach the disk
        // fails this batch.
        if (j.content_fd >= 0 && ::syncfs(j.content_fd) != 0) {
            j.err = errno;
            j.op = "syncfs content directory for";
        } else if ((j.content_fd < 0 || !j.ibdb_on_content_fs) && ::fdatasync(j.fd) != 0) {
            j.err = errno;
            j.op = "fdatasync";
        }
        j.fsync_us = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - t0).count());
        if (j.err != 0) {
            std::lock_guard lock(lane.m);
            cut_back(j, lane);
        }
    }
}

} // namespace

struct Ibdb::Impl {
    struct TaState {
        std::uint32_t file = 0;  // holds the transaction record; 0 = not written yet
        std::vector<std::uint8_t> rcpt;  // per recipient: 0 open, 1 done, 2 deferred
    };

    struct Batch {
        std::string tx, done;  // transaction and completion records
        std::size_t tx_records = 0, done_records = 0;
        std::vector<Durable> acks;
        std::vector<std::function<void()>> written;
        std::vector<std::string> ta_ids;
        Clock::time_point oldest{}, first_done{};
    };

    Impl(asio::any_io_executor ex, asio::thread_pool& pool, IbdbOptions o, IbdbStats& s)
        : owner(std::move(ex)), workers(pool), opt(std::move(o)), stats(s), timer(owner),
          policy(opt.commit_policy, opt.commit_interval) {
        opt.max_batch = std::max(1u, opt.max_batch);
        if (!opt.content_dir.empty()) open_content_dir();
    }

    // Read-only is enough for syncfs, and works when QMGR runs as another
    // user than SMTPS (the content directory is shared through a group).
    // Opened once, once per job that may be out at the same time: syncfs
    // reports a writeback error to each open fd once, so two syncs side by
    // side on one fd could both miss an error the other one took.
    void open_content_dir() {
        std::error_code ec;
        std::filesystem::create_directories(opt.dir, ec);
        for (int& fd : content_fds) {
            fd = ::open(opt.content_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0) break;
        }
        struct stat c, i;
        if (content_fds[1] < 0 || ::fstat(content_fds[0], &c) != 0 ||
            ::stat(opt.dir.c_str(), &i) != 0) {
            const int err = errno;
            close_content_dir();
            throw std::runtime_error("ibdb: cannot open " + opt.content_dir + " or " + opt.dir +
                                     ": " + std::strerror(err));
        }
        ibdb_on_content_fs = c.st_dev == i.st_dev;
        spdlog::info("ibdb: each commit syncs the file system of {}{}", opt.content_dir,
                     ibdb_on_content_fs ? " (which holds the IBDB too)"
                                        : ", then the IBDB file (another file system)");
    }

    void close_content_dir() {
        for (int& fd : content_fds)
            if (fd >= 0) ::close(std::exchange(fd, -1));
    }

    asio::any_io_executor owner;
    asio::thread_pool& workers;
    IbdbOptions opt;
    IbdbStats& stats;
    asio::steady_timer timer;
    CommitPolicy policy;
    Clock::time_point armed = Clock::time_point::max();
    std::uint64_t timer_gen = 0;
    std::shared_ptr<char> alive = std::make_shared<char>();  // for posted handlers

    std::unordered_map<std::string, TaState> tas;   // every transaction in the IBDB
    std::map<std::uint32_t, std::uint64_t> open_in_file;  // live file → open transactions
    int fd = -1;
    int content_fds[2] = {-1, -1};
    bool ibdb_on_content_fs = false;
    std::uint32_t cur_file = 0, next_file = 1;
    std::uint64_t cur_off = 0;
    Clock::time_point last_write = Clock::now();
    // After a failed write (a full disk) the next one waits this long,
    // doubling up to 5 s, instead of retrying in a loop.
    Clock::duration retry_delay{0};

    std::deque<Batch> queue;  // front = next write; only the back takes transactions
    std::deque<std::shared_ptr<Job>> out;  // handed to the workers, in order; at most two
    Lane lane;
    std::uint64_t next_seq = 0;
    // A job out failed: every job behind it fails the same way.
    int chain_err = 0;
    const char* chain_op = "";
    std::size_t chain_done_at = 0;  // where its completion records went back into the queue
    bool flushing = false;

    std::vector<RecoveredTa> recover() {
        std::error_code ec;
        std::filesystem::create_directories(opt.dir, ec);
        if (ec) spdlog::error("ibdb: cannot create {}: {}", opt.dir, ec.message());
        auto log = ibdb::read_log(opt);
        stats.corrupt_records += log.corrupt;
        for (auto f : log.files) open_in_file[f] = 0;
        if (!log.files.empty()) next_file = log.files.back() + 1;
        std::vector<RecoveredTa> out;
        for (auto& [file, ta] : log.tas) {
            TaState st{file, std::vector<std::uint8_t>(ta.rcpt_done.size(), 0)};
            for (std::size_t i = 0; i < st.rcpt.size(); ++i)
                st.rcpt[i] = ta.rcpt_done[i] ? 1 : ta.rcpt_deferred[i] ? 2 : 0;
            tas.emplace(ta.envelope.ta_id, std::move(st));
            ++open_in_file[file];
            out.push_back(std::move(ta));
        }
        for (auto f : log.files) maybe_delete(f, true);
        spdlog::info("ibdb: recovered {} open transactions from {} files, next file {}",
                     out.size(), log.files.size(), ibdb::file_name(next_file));
        return out;
    }

    void append(const sm::msg::TaCommit& ta, Durable cb) {
        if (tas.count(ta.ta_id)) {
            asio::post(owner, [cb = std::move(cb)] { cb(false, "transaction id already logged"); });
            return;
        }
        if (queue.empty() || queue.back().acks.size() >= opt.max_batch) queue.emplace_back();
        Batch& b = queue.back();
        auto now = Clock::now();
        if (b.acks.empty()) b.oldest = now;
        policy.arrived(now);
        ibdb::append_record(b.tx, ibdb::transaction, sm::msg::envelope_bytes(ta));
        ++b.tx_records;
        b.acks.push_back(std::move(cb));
        b.ta_ids.push_back(ta.ta_id);
        tas.emplace(ta.ta_id, TaState{0, std::vector<std::uint8_t>(ta.rcpts.size(), 0)});
        schedule();
    }

    void mark(const std::string& ta_id, std::uint32_t idx, ibdb::RecType type) {
        auto it = tas.find(ta_id);
        if (it == tas.end() || idx >= it->second.rcpt.size()) {
            // Not (or no longer) in the IBDB, e.g. already moved to DEFEDB.
            spdlog::debug("ibdb: {}: recipient {} not in the log, record skipped", ta_id, idx);
            return;
        }
        queue_done(type, ibdb::ref_payload(ta_id, idx));
        auto& rcpt = it->second.rcpt;
        rcpt[idx] = type == ibdb::rcpt_done ? 1 : 2;
        // Every recipient final with some in DEFEDB: the IBDB no longer holds it.
        bool all_final = std::all_of(rcpt.begin(), rcpt.end(), [](auto s) { return s != 0; });
        if (all_final && std::find(rcpt.begin(), rcpt.end(), 2) != rcpt.end()) leave(it);
        schedule();
    }

    void done(const std::string& ta_id, std::function<void()> written) {
        auto it = tas.find(ta_id);
        if (it == tas.end()) {
            if (written) written();
            return;
        }
        queue_done(ibdb::ta_done, ibdb::ref_payload(ta_id, std::nullopt));
        if (written) queue.front().written.push_back(std::move(written));
        leave(it);
        schedule();
    }

    // Completion records ride the front batch; those of earlier batches
    // are in jobs out, whose results come back in order.
    void after_completions(std::function<void()> written) {
        if (!queue.empty() && queue.front().done_records > 0)
            queue.front().written.push_back(std::move(written));
        else if (!out.empty())
            out.back()->written.push_back(std::move(written));
        else
            written();
    }

    void queue_done(ibdb::RecType type, const std::string& payload) {
        if (queue.empty()) queue.emplace_back();
        Batch& b = queue.front();  // rides along with the next write
        if (b.done.empty()) b.first_done = Clock::now();
        ibdb::append_record(b.done, type, payload);
        ++b.done_records;
    }

    void leave(std::unordered_map<std::string, TaState>::iterator it) {
        std::uint32_t f = it->second.file;
        tas.erase(it);
        auto fit = open_in_file.find(f);
        if (fit != open_in_file.end() && --fit->second == 0) maybe_delete(f, false);
    }

    // Deletes a finished file that is no longer appended to.
    void maybe_delete(std::uint32_t f, bool now) {
        auto it = open_in_file.find(f);
        if (it == open_in_file.end() || it->second != 0 || f == cur_file) return;
        open_in_file.erase(it);
        ++stats.files_deleted;
        std::string path = opt.dir + "/" + ibdb::file_name(f);
        spdlog::info("ibdb: {} deleted, no open transactions", ibdb::file_name(f));
        auto rm = [path, dir = opt.dir, sync = opt.fsync] {
            if (::unlink(path.c_str()) != 0 && errno != ENOENT)
                spdlog::error("ibdb: unlink {}: {}", path, std::strerror(errno));
            if (sync) fsync_dir(dir);
        };
        if (now)
            rm();
        else
            asio::post(workers, rm);
    }

    // Decides when the front batch goes out: at once when full, when the
    // commit policy says (after commit_interval at the latest), or
    // (completion records only) after completion_delay; behind a write that
    // is still out only as CommitPolicy::due_behind says. An idle log with
    // nothing open is removed.
    void schedule() {
        if (flushing || out.size() >= 2) return;
        auto now = Clock::now();
        if (!queue.empty()) {
            const Batch& b = queue.front();
            std::optional<Clock::time_point> due;
            if (!b.acks.empty()) {
                const auto alone = b.acks.size() >= opt.max_batch ? now : policy.due(b.oldest);
                if (out.empty())
                    due = alone;
                else if (may_overlap())
                    due = policy.due_behind(alone, out.front()->started);
            } else if (out.empty()) {
                due = b.done.size() >= (1u << 20) ? now : b.first_done + opt.completion_delay;
            }
            if (!due)
                return;
            if (*due <= now)
                start();
            else
                arm(*due);
        } else if (out.empty() && fd >= 0 && tas.empty()) {
            auto due = last_write + opt.idle_retire;
            if (due <= now)
                retire(false);
            else
                arm(due);
        }
    }

    // Whether the front batch may go while the one job out has not come
    // back: only a synced write into the same file, nothing failed, and
    // one syncfs covering content and IBDB alike, each job on a content fd
    // of its own (two fdatasyncs side by side on the one IBDB fd could
    // each miss a writeback error the other one took).
    bool may_overlap() const {
        if (out.size() != 1 || chain_err != 0 || content_fds[0] < 0 || !ibdb_on_content_fs)
            return false;
        const Job& o = *out.front();
        return o.sync && !o.open_file && o.off + o.buf.size() < opt.file_size;
    }

    void arm(Clock::time_point due) {
        if (armed <= due) return;
        armed = due;
        timer.expires_at(due);
        timer.async_wait([this, gen = ++timer_gen, w = std::weak_ptr<char>(alive)](
                             boost::system::error_code ec) {
            if (ec || !w.lock() || gen != timer_gen) return;
            armed = Clock::time_point::max();
            schedule();
        });
    }

    std::shared_ptr<Job> make_job() {
        Batch b = std::move(queue.front());
        queue.pop_front();
        auto j = std::make_shared<Job>();
        j->started = Clock::now();
        // Behind a job still out (never one that opens a file): right
        // after its records.
        j->off = out.empty() ? cur_off : out.back()->off + out.back()->buf.size();
        j->open_file = fd < 0 || j->off >= opt.file_size;
        if (j->open_file && !out.empty()) sm::panic("ibdb: a new log file behind a write still out");
        j->file = j->open_file ? next_file : cur_file;
        j->fd = fd;
        j->dir = opt.dir;
        j->done_from = b.tx.size();
        j->buf = std::move(b.tx);
        j->buf += b.done;
        j->records = b.tx_records + b.done_records;
        j->done_records = b.done_records;
        j->acks = std::move(b.acks);
        j->written = std::move(b.written);
        j->ta_ids = std::move(b.ta_ids);
        j->sync = opt.fsync && !j->acks.empty();
        j->no_sync = !opt.fsync;
        j->seq = next_seq++;
        j->content_fd = content_fds[j->seq % 2];
        j->ibdb_on_content_fs = ibdb_on_content_fs;
        out.push_back(j);
        return j;
    }

    void start() {
        auto j = make_job();
        // The lane outlives the job: the destructor waits for every job out.
        asio::post(workers, [j, ex = owner, w = std::weak_ptr<char>(alive), &lane = lane, this] {
            run_job(*j, lane);
            {
                std::lock_guard lock(j->m);
                j->finished = true;
            }
            j->cv.notify_all();
            asio::post(ex, [w, this] {
                if (w.lock()) take_results();
            });
        });
    }

    // The results of the jobs that are back, in the order they went out.
    void take_results() {
        while (!out.empty()) {
            auto j = out.front();
            {
                std::lock_guard lock(j->m);
                if (!j->finished) break;
            }
            out.pop_front();
            finish(j);
        }
        schedule();
    }

    // Owner side of a finished job, the oldest out: file bookkeeping,
    // stats, then the acks.
    void finish(const std::shared_ptr<Job>& j) {
        // Behind a failed job this one fails too, whatever it found: the
        // file was cut back in front of its records, or a writeback error
        // both syncs waited for was reported to the other one only.
        if (chain_err != 0 && j->err == 0) {
            j->err = chain_err;
            j->op = chain_op;
        }
        if (j->opened) {
            std::uint32_t old = cur_file;
            fd = j->fd;
            cur_file = j->file;
            next_file = cur_file + 1;
            cur_off = 0;
            open_in_file.emplace(cur_file, 0);
            maybe_delete(old, false);
        }
        std::string error;
        if (j->err == 0) {
            retry_delay = Clock::duration(0);
            cur_off = j->off + j->buf.size();
            last_write = Clock::now();
            stats.records += j->records;
            if (!j->acks.empty()) {
                // Counted also with fsync off, so that perf runs still show
                // transactions per commit.
                ++stats.commits;
                policy.committed(Clock::now() - j->started);
                stats.transactions += j->acks.size();
                stats.fsync_us_total += j->fsync_us;
                stats.fsync_us_max = std::max(stats.fsync_us_max, j->fsync_us);
                stats.fsync_seconds.observe(static_cast<double>(j->fsync_us) / 1e6);
                stats.batch_size.observe(static_cast<double>(j->acks.size()));
            }
            for (const auto& id : j->ta_ids) {
                auto it = tas.find(id);
                if (it == tas.end() || it->second.file != 0) continue;  // finished meanwhile
                it->second.file = cur_file;
                ++open_in_file[cur_file];
            }
        } else {
            error = std::string(j->op) + " " + ibdb::file_name(j->file) + ": " +
                    std::strerror(j->err);
            spdlog::error("ibdb: {} ({} transactions not logged)", error, j->acks.size());
            if (chain_err == 0) {
                chain_err = j->err;
                chain_op = j->op;
                chain_done_at = 0;
            }
            // Could not cut the half record off: never append behind it.
            if (j->truncate_failed) cur_off = std::max(cur_off, opt.file_size);
            for (const auto& id : j->ta_ids) {
                auto it = tas.find(id);
                if (it != tas.end() && it->second.file == 0) tas.erase(it);
            }
            ++stats.write_failures;
            retry_delay = std::clamp<Clock::duration>(2 * retry_delay, opt.completion_delay,
                                                      std::chrono::seconds(5));
            if (j->done_records) {  // completion records try again with the next write
                if (queue.empty()) queue.emplace_back();
                Batch& b = queue.front();
                b.first_done = Clock::now() + retry_delay - opt.completion_delay;
                // Behind those of a failed job before it: in their order.
                b.done.insert(chain_done_at, j->buf, j->done_from);
                chain_done_at += j->buf.size() - j->done_from;
                b.done_records += j->done_records;
                // The content files still go (their `written` callbacks run
                // below): on a full disk that is what makes room for the
                // records. A crash before they are written costs only a
                // quarantined envelope of a finished message at recovery.
            }
        }
        if (out.empty() && chain_err != 0) {  // the failed ones are all back
            chain_err = 0;
            std::lock_guard lock(lane.m);
            lane.cut = false;
        }
        for (auto& cb : j->acks) cb(j->err == 0, error);
        for (auto& cb : j->written) cb();
    }

    // Writes out the jobs in flight and every queued batch on this thread.
    void flush_queue() {
        flushing = true;
        for (;;) {
            if (!out.empty()) {
                auto j = out.front();
                std::unique_lock lock(j->m);
                j->cv.wait(lock, [&] { return j->finished; });
                lock.unlock();
                out.pop_front();
                finish(j);
            } else if (!queue.empty()) {
                auto n = make_job();
                run_job(*n, lane);
                n->finished = true;
            } else {
                break;
            }
        }
        flushing = false;
    }

    void flush_sync() {
        flush_queue();
        schedule();  // arms the idle check
    }

    // Closes and removes the current file; only when no transaction is open
    // anywhere, so it holds nothing anyone needs. The next write starts a new one.
    void retire(bool now) {
        std::string path = opt.dir + "/" + ibdb::file_name(cur_file);
        spdlog::info("ibdb: {} deleted, nothing open", ibdb::file_name(cur_file));
        open_in_file.erase(cur_file);
        ++stats.files_deleted;
        auto rm = [f = fd, path, dir = opt.dir, sync = opt.fsync] {
            ::close(f);
            ::unlink(path.c_str());
            if (sync) fsync_dir(dir);
        };
        fd = -1;
        cur_file = 0;
        cur_off = 0;
        if (now)
            rm();
        else
            asio::post(workers, rm);
    }

    std::size_t pending() const {
        std::size_t n = 0;
        for (const auto& b : queue) n += b.tx_records + b.done_records;
        return n;
    }

    ~Impl() {
        flush_queue();
        close_content_dir();
        if (fd < 0) return;
        if (tas.empty())
            retire(true);
        else
            ::close(fd);
    }
};

Ibdb::Ibdb(asio::any_io_executor owner, asio::thread_pool& workers, IbdbOptions opt)
    : impl_(std::make_unique<Impl>(std::move(owner), workers, std::move(opt), stats_)) {}

Ibdb::~Ibdb() = default;

std::vector<RecoveredTa> Ibdb::recover() { return impl_->recover(); }

void Ibdb::append_transaction(const sm::msg::TaCommit& ta, Durable on_durable) {
    impl_->append(ta, std::move(on_durable));
}

void Ibdb::rcpt_done(const std::string& ta_id, std::uint32_t idx) {
    impl_->mark(ta_id, idx, ibdb::rcpt_done);
}

void Ibdb::rcpt_deferred(const std::string& ta_id, std::uint32_t idx) {
    impl_->mark(ta_id, idx, ibdb::rcpt_deferred);
}

asio::awaitable<std::tuple<bool, std::string>> Ibdb::append(sm::msg::TaCommit ta) {
    return asio::async_initiate<const asio::use_awaitable_t<>, void(bool, std::string)>(
        [this](auto handler, sm::msg::TaCommit ta) {
            // Durable is copyable and may run inside flush_sync(): the
            // handler is shared, and posted to the coroutine's executor,
            // which counts it as work until then.
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            auto ex = asio::prefer(asio::get_associated_executor(*h),
                                   asio::execution::outstanding_work.tracked);
            append_transaction(ta, [h, ex](bool ok, const std::string& error) {
                asio::post(ex, [h, ok, error] { std::move(*h)(ok, error); });
            });
        },
        asio::use_awaitable, std::move(ta));
}

void Ibdb::ta_done(const std::string& ta_id, std::function<void()> written) {
    impl_->done(ta_id, std::move(written));
}

void Ibdb::after_completions(std::function<void()> written) {
    impl_->after_completions(std::move(written));
}

void Ibdb::flush_sync() { impl_->flush_sync(); }

std::size_t Ibdb::pending() const { return impl_->pending(); }

} // namespace smx::qmgr
