// Start-up: the transactions IBDB recovered go back into the active queue;
// envelopes without their whole content go to quarantine. DEFEDB needs no replay: its
// timer starts reading the index head. Then the orphan sweeper starts.
#include "qmgr.hpp"

#include "ids.hpp"
#include "quarantine.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {

void Qmgr::restore(std::vector<RecoveredTa> tas) {
    std::size_t restored = 0;
    for (auto& rt : tas) {
        const auto& env = rt.envelope;
        const std::string cdb = sm::valid_ta_id(env.cdb_id)
                                    ? sm::cdb_path(content_, env.cdb_id, cfg_.queue.cdb_hashed)
                                    : std::string();
        struct stat st;
        const bool missing =
            !sm::valid_ta_id(env.ta_id) || cdb.empty() || ::stat(cdb.c_str(), &st) != 0;
        // The envelope's size is the content file's: a power cut during a
        // batch sync whose ack never went out can leave an envelope durable
        // with its content file short (content_sync = "batch" syncs both
        // in one syncfs). Never deliver a truncated message.
        const bool wrong_size = !missing && static_cast<std::uint64_t>(st.st_size) != env.size;
        if (missing || wrong_size) {
            // Nothing to deliver without content: keep the envelope (and
            // what there is of the content) for a human, and close the
            // transaction so the log can be rotated.
            const std::string qdir = cfg_.quarantine_dir_abs();
            const std::string name =
                (sm::valid_ta_id(env.ta_id) ? env.ta_id : "invalid") + std::string(".envelope");
            const std::string what =
                missing ? "missing"
                        : fmt::format("{} bytes, the envelope says {}", st.st_size, env.size);
            if (wrong_size) {
                const std::string name = "cdb-" + env.cdb_id;
                if (const int e = quarantine_move(cdb, qdir, name))
                    spdlog::error("{}: cannot move {} to {}/{}: {}", env.ta_id, cdb, qdir, name,
                                  std::strerror(e));
            }
            const std::string err = quarantine_write(qdir, name, sm::msg::envelope_bytes(env));
            if (err.empty())
                spdlog::error("{}: content file {} {} at recovery; envelope saved as {}/{}",
                              env.ta_id, cdb.empty() ? "(invalid id)" : cdb, what, qdir, name);
            else
                spdlog::error("{}: content file {} {} at recovery; envelope not saved ({})",
                              env.ta_id, cdb.empty() ? "(invalid id)" : cdb, what, err);
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
        for (auto i : todo) deferred_.remove(ta->id, i);
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
    deferred_.start();
    sweeper_.start();
}

} // namespace smx::qmgr
