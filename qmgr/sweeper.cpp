#include "qmgr/sweeper.hpp"

#include "libsm/await.hpp"
#include "qmgr/quarantine.hpp"

#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <unordered_set>

namespace smx::qmgr {

namespace {

namespace fs = std::filesystem;

// Ids of the content files last written before cutoff (smx::content::list:
// a .tmp, not yet durable, is never listed).
std::vector<std::string> old_content_files(const std::string& content,
                                           std::chrono::system_clock::time_point cutoff) {
    std::vector<std::string> ids;
    if (const int err = smx::content::list(content, cutoff, ids))
        spdlog::error("orphan sweep: {}: {}", content, std::strerror(err));
    return ids;
}

// The content files the active queue may name: a content id is the id of the
// transaction that wrote it; one in a content segment may have a DEFEDB copy.
std::unordered_set<std::string> queued_content_ids(const ActiveQueue& queue) {
    std::unordered_set<std::string> ids;
    queue.for_each([&](const Ta& ta) {
        ids.insert(ta.content_id());
        ids.insert(ta.id);
    });
    return ids;
}

// What an orphan may be to be kept: a file of SMTPS's or ours, and no larger
// than anything smx writes (a message, or a DSN returning one whole).
smx::content::Expect orphan_bound(const smx::Config& cfg) {
    const auto w = smx::content::writers_from_env();
    return {w.smtps, w.qmgr, 2 * cfg.server.max_message_size + (1u << 20), false};
}

} // namespace

OrphanSweeper::OrphanSweeper(const smx::Config& cfg, asio::any_io_executor ex,
                             asio::thread_pool& workers, const ActiveQueue& queue,
                             DefedbStrand& defedb, Reaper& reaper)
    : cfg_(cfg), ex_(ex), workers_(workers), queue_(queue), defedb_(defedb), reaper_(reaper),
      content_(cfg.content_dir_abs()), quarantine_(cfg.quarantine_dir_abs()),
      orphan_(orphan_bound(cfg)), timer_(ex) {}

void OrphanSweeper::start() { tasks_.spawn(ex_, run(), "orphan sweep"); }

void OrphanSweeper::stop() {
    stopped_ = true;
    timer_.cancel();
}

asio::awaitable<void> OrphanSweeper::run() {
    while (!stopped_) {
        co_await sweep();
        if (stopped_) break;
        timer_.expires_after(
            std::max<std::chrono::seconds>(cfg_.queue.orphan_age / 2, std::chrono::seconds(1)));
        auto [ec] = co_await timer_.async_wait(smx::await_tuple);
        if (ec) break;  // stop()
    }
}

// No file of a live transaction is touched: the pool lists the old files;
// those the active queue holds are kept; DEFEDB keeps those it holds (on its
// strand, after every write asked for before); then those in the queue or
// unlinked during the sweep are kept again. A TA_COMMIT after the move finds
// no file and gets a tempfail.
asio::awaitable<void> OrphanSweeper::sweep() {
    reaper_.sweep_begin();
    const auto cutoff = std::chrono::system_clock::now() - cfg_.queue.orphan_age;
    auto list = [content = content_, cutoff] { return old_content_files(content, cutoff); };
    auto old = co_await run_on(workers_.get_executor(), std::move(list));
    if (!stopped_) {
        std::erase_if(old, [known = queued_content_ids(queue_)](const std::string& id) {
            return known.count(id) > 0;
        });
        auto unknown = [old = std::move(old)](Defedb& db) mutable {
            std::erase_if(old, [&](const std::string& id) { return db.has_ta(id); });
            return std::move(old);
        };
        auto left = co_await defedb_.run(std::move(unknown));
        if (left) quarantine(*left);
    }
    reaper_.sweep_end();
}

void OrphanSweeper::quarantine(const std::vector<std::string>& ids) {
    if (ids.empty()) return;
    const auto known = queued_content_ids(queue_);
    for (const auto& id : ids) {
        if (reaper_.unlinked_during_sweep(id) || known.count(id)) continue;
        // On the event loop, like the checks above: no TA_COMMIT can name
        // the file between them and the move (a copy only when content_dir
        // is on another file system, for a rare crash leftover).
        const auto from = smx::content::file_path(content_, id, cfg_.queue.cdb_hashed);
        const std::string name = "cdb-" + id;
        std::string why;
        if (const int err = quarantine_move(from, quarantine_, name, orphan_, why)) {
            if (err == EBADMSG || err == ELOOP)
                spdlog::warn("{}: orphan {} removed: {}", id, from, why);
            else if (err != ENOENT)
                spdlog::error("{}: orphan content file {}: {}", id, from, why);
            continue;
        }
        spdlog::warn("{}: orphan content file (no transaction names it) moved to {}/{}", id,
                     quarantine_, name);
        ++quarantined_;
    }
}

} // namespace smx::qmgr
