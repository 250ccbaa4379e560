// Start-up: the transactions IBDB recovered go back into the active queue;
// envelopes without content go to quarantine. DEFEDB needs no replay: its
// timer starts reading the index head. And, from then on, the periodic sweep
// of content files that no transaction names.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unordered_set>

namespace smx::qmgr {

namespace {

namespace fs = std::filesystem;

// Ids of the content files under dir last written before cutoff. SMTPS
// writes <id>.tmp and renames it once durable, so a .tmp is never listed.
std::vector<std::string> old_content_files(const std::string& dir, fs::file_time_type cutoff) {
    std::vector<std::string> ids;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        std::string name = it->path().filename().string();
        std::error_code fec;
        if (!sm::valid_ta_id(name) || !it->is_regular_file(fec)) continue;
        const auto t = it->last_write_time(fec);
        if (!fec && t < cutoff) ids.push_back(std::move(name));
    }
    if (ec && ec != std::errc::no_such_file_or_directory)
        spdlog::error("orphan sweep: {}: {}", dir, ec.message());
    return ids;
}

} // namespace

void Qmgr::restore(std::vector<RecoveredTa> tas) {
    std::size_t restored = 0;
    for (auto& rt : tas) {
        const auto& env = rt.envelope;
        const std::string cdb = sm::valid_ta_id(env.cdb_id)
                                    ? sm::cdb_path(spool_, env.cdb_id, cfg_.queue.cdb_hashed)
                                    : std::string();
        struct stat st;
        if (!sm::valid_ta_id(env.ta_id) || cdb.empty() || ::stat(cdb.c_str(), &st) != 0) {
            // Nothing to deliver without content: keep the envelope for a
            // human, and close the transaction so the log can be rotated.
            const std::string note = spool_ + "/quarantine/" +
                                     (sm::valid_ta_id(env.ta_id) ? env.ta_id : "invalid") +
                                     ".envelope";
            std::ofstream(note, std::ios::binary) << sm::msg::envelope_bytes(env);
            spdlog::error("{}: content file {} missing at recovery; envelope saved as {}",
                          env.ta_id, cdb.empty() ? "(invalid id)" : cdb, note);
            ++counters_.quarantined;
            ibdb_.ta_done(env.ta_id);
            continue;
        }
        // Those IBDB marks deferred stay closed: DEFEDB's timer brings them back.
        Ta* ta = queue_.admit_recovered(env, rt.rcpt_done, rt.rcpt_deferred);
        if (!ta) continue;  // the log held it twice; the first copy counts
        std::vector<std::uint32_t> todo;
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i)
            if (ta->rcpt(i).state() == RcptState::active) todo.push_back(i);
        // A crash between the DEFEDB write and IBDB's (unsynced) "deferred"
        // record leaves a recipient in both: memory delivers it now, so its
        // DEFEDB copy goes (queued before the first due() on the strand), and
        // the content waits for DEFEDB's word on the rest.
        for (auto i : todo) removes_.emplace_back(ta->id, i);
        if (todo.empty()) {
            check_ta(*ta);
            continue;
        }
        ++restored;
        spdlog::info("{}: from=<{}>, size={}, nrcpt={} (queue active, recovered)", ta->id,
                     ta->sender(), ta->size(), ta->rcpts().size());
        schedule(*ta, todo);
    }
    if (!tas.empty())
        spdlog::info("recovery: {} transactions back in the active queue", restored);
    kick_db();
    maintain();
    sweep_orphans();
}

// Content files that no transaction names (a crash between SMTPS's write
// and the IBDB commit, or before an unlink) go to quarantine/: their
// senders never got a 250. In three steps, so that no file of a live
// transaction is touched: the pool lists the old files; DEFEDB keeps those it
// holds (on its strand, after every write asked for before); then, here,
// those in the queue or finished during the sweep are kept. A TA_COMMIT
// after the move finds no file and gets a tempfail. (A CDB id is the id of
// the transaction that wrote it.)
void Qmgr::sweep_orphans() {
    sweeping_ = true;
    unlinked_in_sweep_.clear();
    const auto cutoff = fs::file_time_type::clock::now() - cfg_.queue.orphan_age;
    asio::post(workers_, [this, ex = ex_, dir = spool_ + "/cdb", cutoff] {
        auto old = old_content_files(dir, cutoff);
        asio::post(ex, [this, old = std::move(old)]() mutable {
            if (!accepting_) return;
            std::erase_if(old, [known = queued_cdb_ids()](const std::string& id) {
                return known.count(id) > 0;
            });
            db<std::vector<std::string>>(
                [old = std::move(old)](Defedb& db) mutable {
                    std::erase_if(old, [&](const std::string& id) { return db.has_ta(id); });
                    return std::move(old);
                },
                [this](std::optional<std::vector<std::string>> left) {
                    if (left) quarantine_orphans(*left);
                    sweeping_ = false;
                    if (!accepting_) return;
                    sweep_timer_.expires_after(std::max<std::chrono::seconds>(
                        cfg_.queue.orphan_age / 2, std::chrono::seconds(1)));
                    sweep_timer_.async_wait([this](boost::system::error_code ec) {
                        if (!ec) sweep_orphans();
                    });
                });
        });
    });
}

std::unordered_set<std::string> Qmgr::queued_cdb_ids() const {
    std::unordered_set<std::string> ids;
    queue_.for_each([&](const Ta& ta) { ids.insert(ta.cdb_id()); });
    return ids;
}

void Qmgr::quarantine_orphans(const std::vector<std::string>& ids) {
    if (ids.empty()) return;
    const auto known = queued_cdb_ids();
    std::uint64_t moved = 0;
    for (const auto& id : ids) {
        if (unlinked_in_sweep_.count(id) || known.count(id)) continue;
        const auto from = sm::cdb_path(spool_, id, cfg_.queue.cdb_hashed);
        const auto to = spool_ + "/quarantine/cdb-" + id;
        if (::rename(from.c_str(), to.c_str()) != 0) {
            if (errno != ENOENT)
                spdlog::error("{}: orphan content file {}: {}", id, from, std::strerror(errno));
            continue;
        }
        spdlog::warn("{}: orphan content file (no transaction names it) moved to {}", id, to);
        ++moved;
    }
    counters_.quarantined += moved;
}

} // namespace smx::qmgr
