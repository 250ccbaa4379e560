// Start-up: the transactions IBDB recovered go back into the active queue;
// envelopes without content and content without envelope go to quarantine.
// DEFEDB needs no replay: its timer starts reading the index head.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace smx::qmgr {

namespace {

// SMTPS may still be writing a file (as <id>.tmp, renamed when durable, and
// committed right after): only files older than this can be orphans.
constexpr auto orphan_age = std::chrono::seconds(60);

} // namespace

void Qmgr::restore(std::vector<RecoveredTa> tas) {
    std::size_t restored = 0;
    std::set<std::string> known;
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
        known.insert(env.cdb_id);
        Ta* ta = queue_.add(env);
        if (!ta) continue;  // the log held it twice; the first copy counts
        ta->durable = true;
        std::vector<std::uint32_t> todo;
        for (std::uint32_t i = 0; i < ta->rcpts.size(); ++i) {
            if (i < rt.rcpt_done.size() && rt.rcpt_done[i]) {
                queue_.close(*ta, i, RcptState::done);
            } else if (i < rt.rcpt_deferred.size() && rt.rcpt_deferred[i]) {
                // DEFEDB holds it; its timer brings it back.
                ta->rcpts[i].from_defedb = true;
                ta->touched_defedb = true;
                queue_.close(*ta, i, RcptState::deferred);
            } else {
                todo.push_back(i);
            }
        }
        // A crash between the DEFEDB write and IBDB's (unsynced) "deferred"
        // record leaves a recipient in both: memory delivers it now, so its
        // DEFEDB copy goes (queued before the first due() on the strand), and
        // the content waits for DEFEDB's word on the rest.
        ta->touched_defedb = true;
        for (auto i : todo) removes_.emplace_back(ta->id, i);
        if (todo.empty()) {
            check_ta(*ta);
            continue;
        }
        ++restored;
        spdlog::info("{}: from=<{}>, size={}, nrcpt={} (queue active, recovered)", ta->id,
                     ta->sender(), ta->size(), ta->rcpts.size());
        schedule(*ta, todo);
    }
    if (!tas.empty())
        spdlog::info("recovery: {} transactions back in the active queue", restored);
    kick_db();
    maintain();
    sweep_orphans(std::move(known));
}

// Content files no envelope names (a crash between SMTPS's write and the
// IBDB commit, or before an unlink) go to quarantine. Runs on the DEFEDB
// strand (it asks DEFEDB about each candidate) while QMGR already serves.
void Qmgr::sweep_orphans(std::set<std::string> known) {
    const std::string cdb_dir = spool_ + "/cdb", qdir = spool_ + "/quarantine";
    db<std::uint64_t>(
        [known = std::move(known), cdb_dir, qdir](Defedb& db) {
            namespace fs = std::filesystem;
            std::uint64_t moved = 0;
            const auto cutoff = fs::file_time_type::clock::now() - orphan_age;
            std::error_code ec;
            for (auto it = fs::recursive_directory_iterator(cdb_dir, ec);
                 !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
                const std::string name = it->path().filename().string();
                if (!sm::valid_ta_id(name) || !it->is_regular_file(ec)) continue;  // .tmp too
                if (known.count(name) || it->last_write_time(ec) > cutoff || ec) continue;
                if (db.has_ta(name)) continue;
                const fs::path to = fs::path(qdir) / ("cdb-" + name);
                fs::rename(it->path(), to, ec);
                if (ec) {
                    spdlog::error("{}: orphan content file {}: {}", name, it->path().string(),
                                  ec.message());
                    ec.clear();
                    continue;
                }
                spdlog::warn("{}: orphan content file (no envelope names it) moved to {}", name,
                             to.string());
                ++moved;
            }
            return moved;
        },
        [this](std::optional<std::uint64_t> n) {
            if (n && *n) counters_.quarantined += *n;
        });
}

} // namespace smx::qmgr
