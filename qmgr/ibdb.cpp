// IBDB group commit: the glue of its parts, each the one owner of its state
// (all of them on the owner's, QMGR's, executor but the writes):
//   LogFiles       (ibdb_files)    which file holds which transaction, which
//                                  is appended to, when a file goes
//   Batcher        (ibdb_batcher)  the records waiting, when a batch is cut
//   CommitPipeline (ibdb_pipeline) the jobs out on the worker pool, their
//                                  order and states, a failure failing those
//                                  behind it
// One commit, in order:
//   start()        the front batch becomes a job: where its records go (the
//                  end of the current file, behind the write out, or a new file)
//   run_commit()   on a worker, in the job's turn: write the records, sync the
//                  content file system (syncfs), sync the log (fdatasync)
//   settle()       back on the owner, in the order the jobs went out: the file
//                  it wrote, its transactions placed in it, the counters; then
//                  the pipeline acks its transactions and runs the callbacks of
//                  its completion records
#include "qmgr/ibdb.hpp"

#include "qmgr/ibdb_batcher.hpp"
#include "qmgr/ibdb_files.hpp"
#include "qmgr/ibdb_pipeline.hpp"
#include "qmgr/ibdb_record.hpp"

#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <sys/stat.h>
#include <unistd.h>
#include <utility>

namespace smx::qmgr {

using Clock = std::chrono::steady_clock;

struct Ibdb::Impl {
    Impl(asio::any_io_executor ex, asio::thread_pool& pool, IbdbOptions o, IbdbStats& s)
        : owner(std::move(ex)), workers(pool), opt(std::move(o)), stats(s), timer(owner),
          files(opt.dir, opt.fsync, workers, stats), batcher(opt),
          pipeline(owner, workers, [this](ibdb::Job& j) { return settle(j); },
                   [this] { schedule(); }) {
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
    Clock::time_point armed = Clock::time_point::max();
    std::uint64_t timer_gen = 0;
    std::shared_ptr<char> alive = std::make_shared<char>();  // for the timer's handler
    int content_fds[2] = {-1, -1};
    bool ibdb_on_content_fs = false;
    std::uint64_t jobs_made = 0;
    bool flushing = false;
    ibdb::LogFiles files;
    ibdb::Batcher batcher;
    ibdb::CommitPipeline pipeline;

    std::vector<RecoveredTa> recover() {
        std::error_code ec;
        std::filesystem::create_directories(opt.dir, ec);
        if (ec) spdlog::error("ibdb: cannot create {}: {}", opt.dir, ec.message());
        auto log = ibdb::read_log(opt);
        stats.corrupt_records += log.corrupt;
        files.recovered(log);
        std::vector<RecoveredTa> out;
        for (auto& [file, ta] : log.tas) out.push_back(std::move(ta));
        spdlog::info("ibdb: recovered {} open transactions from {} files, next file {}",
                     out.size(), log.files.size(), ibdb::file_name(files.next_number()));
        return out;
    }

    void append(const smx::msg::TaCommit& ta, Durable cb) {
        if (files.holds(ta.ta_id)) {
            asio::post(owner, [cb = std::move(cb)] { cb(false, "transaction id already logged"); });
            return;
        }
        batcher.add_transaction(ta.ta_id, smx::msg::envelope_bytes(ta), std::move(cb));
        files.logging(ta.ta_id, ta.rcpts.size());
        schedule();
    }

    void mark(const std::string& ta_id, std::uint32_t idx, ibdb::RecType type) {
        if (!files.mark(ta_id, idx, type)) {
            // Not (or no longer) in the IBDB, e.g. already moved to DEFEDB.
            spdlog::debug("ibdb: {}: recipient {} not in the log, record skipped", ta_id, idx);
            return;
        }
        batcher.add_completion(type, ibdb::ref_payload(ta_id, idx));
        schedule();
    }

    void done(const std::string& ta_id, std::function<void()> written) {
        if (!files.done(ta_id)) {
            if (written) written();
            return;
        }
        batcher.add_completion(ibdb::ta_done, ibdb::ref_payload(ta_id, std::nullopt));
        if (written && !batcher.after_front(written))
            smx::panic("ibdb: " + ta_id + ": no batch for its ta_done record");
        schedule();
    }

    // Completion records ride the front batch; those of earlier batches
    // are in jobs out, settled in order.
    void after_completions(std::function<void()> written) {
        if (batcher.after_front(written) || pipeline.after_last(written)) return;
        written();
    }

    // Decides when the front batch goes out: at once when full, when the
    // commit policy says (after commit_interval at the latest), or
    // (completion records only) after completion_delay; behind a write that
    // is still out only as CommitPolicy::due_behind says. An idle log with
    // nothing open is removed.
    void schedule() {
        if (flushing || pipeline.out() >= 2) return;
        const auto now = Clock::now();
        if (!batcher.empty()) {
            const ibdb::Job* out = pipeline.first();
            const auto due = batcher.due(now, out ? std::optional(out->started) : std::nullopt,
                                         may_overlap());
            if (!due) return;
            if (*due <= now)
                start();
            else
                arm(*due);
        } else if (pipeline.out() == 0 && files.fd() >= 0 && files.empty()) {
            const auto due = files.last_write() + opt.idle_retire;
            if (due <= now)
                files.retire(false);
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
        if (pipeline.out() != 1 || pipeline.failing() || content_fds[0] < 0 ||
            !ibdb_on_content_fs)
            return false;
        const ibdb::Job& o = *pipeline.first();
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

    // The front batch as a job: right after the records of the job still
    // out (never one that opens a file), or at the end of the current file,
    // or at the start of a new one.
    std::shared_ptr<ibdb::Job> make_job() {
        auto b = batcher.take();
        auto j = std::make_shared<ibdb::Job>();
        j->started = Clock::now();
        const ibdb::Job* before = pipeline.last();
        j->off = before ? before->off + before->buf.size() : files.end();
        j->open_file = files.fd() < 0 || j->off >= opt.file_size;
        if (j->open_file && before) smx::panic("ibdb: a new log file behind a write still out");
        j->file = j->open_file ? files.next_number() : files.current();
        j->fd = files.fd();
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
        j->content_fd = content_fds[jobs_made++ % 2];
        j->ibdb_on_content_fs = ibdb_on_content_fs;
        return j;
    }

    void start() { pipeline.start(make_job()); }

    // The owner's part of a job that came back, in order: the error its
    // acks get ("" when it is acked).
    std::string settle(ibdb::Job& j) {
        if (j.opened) files.switched(j.file, j.fd);
        if (j.state() == ibdb::JobState::acked) {
            batcher.write_ok();
            files.wrote(j.off + j.buf.size());
            stats.records += j.records;
            if (!j.acks.empty()) {
                // Counted also with fsync off, so that perf runs still show
                // transactions per commit.
                ++stats.commits;
                batcher.committed(Clock::now() - j.started);
                stats.transactions += j.acks.size();
                stats.fsync_us_total += j.fsync_us;
                stats.fsync_us_max = std::max(stats.fsync_us_max, j.fsync_us);
                stats.fsync_seconds.observe(static_cast<double>(j.fsync_us) / 1e6);
                stats.batch_size.observe(static_cast<double>(j.acks.size()));
            }
            for (const auto& id : j.ta_ids) files.placed(id);
            return {};
        }
        const std::string error =
            std::string(j.op) + " " + ibdb::file_name(j.file) + ": " + std::strerror(j.err);
        spdlog::error("ibdb: {} ({} transactions not logged)", error, j.acks.size());
        // Could not cut the half record off: never append behind it.
        if (j.truncate_failed) files.spoilt(opt.file_size);
        for (const auto& id : j.ta_ids) files.not_placed(id);
        ++stats.write_failures;
        batcher.write_failed();
        // The completion records try again with a later write. The content
        // files they close still go (their callbacks run): on a full disk
        // that is what makes room for the records; a crash before they are
        // written costs only a quarantined envelope of a finished message.
        if (j.done_records)
            batcher.retry_completions(std::string_view(j.buf).substr(j.done_from),
                                      j.done_records, j.first_failure);
        return error;
    }

    // Writes out the jobs in flight and every queued batch on this thread.
    void flush_queue() {
        flushing = true;
        pipeline.flush([this] { return batcher.empty() ? nullptr : make_job(); });
        flushing = false;
    }

    void flush_sync() {
        flush_queue();
        schedule();  // arms the idle check
    }

    std::size_t pending() const { return batcher.pending(); }

    ~Impl() {
        flush_queue();
        close_content_dir();
        files.close();
    }
};

Ibdb::Ibdb(asio::any_io_executor owner, asio::thread_pool& workers, IbdbOptions opt)
    : impl_(std::make_unique<Impl>(std::move(owner), workers, std::move(opt), stats_)) {}

Ibdb::~Ibdb() = default;

std::vector<RecoveredTa> Ibdb::recover() { return impl_->recover(); }

void Ibdb::append_transaction(const smx::msg::TaCommit& ta, Durable on_durable) {
    impl_->append(ta, std::move(on_durable));
}

void Ibdb::rcpt_done(const std::string& ta_id, std::uint32_t idx) {
    impl_->mark(ta_id, idx, ibdb::rcpt_done);
}

void Ibdb::rcpt_deferred(const std::string& ta_id, std::uint32_t idx) {
    impl_->mark(ta_id, idx, ibdb::rcpt_deferred);
}

asio::awaitable<std::tuple<bool, std::string>> Ibdb::append(smx::msg::TaCommit ta) {
    return asio::async_initiate<const asio::use_awaitable_t<>, void(bool, std::string)>(
        [this](auto handler, smx::msg::TaCommit ta) {
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
