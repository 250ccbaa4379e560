// Start-up: the transactions IBDB recovered go back into the active queue;
// envelopes without content go to quarantine. DEFEDB needs no replay: its
// timer starts reading the index head. Then the orphan sweeper starts.
#include "qmgr.hpp"

#include "ids.hpp"
#include "quarantine.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>

namespace smx::qmgr {

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
            const std::string qdir = spool_ + "/quarantine";
            const std::string name =
                (sm::valid_ta_id(env.ta_id) ? env.ta_id : "invalid") + std::string(".envelope");
            const std::string err = quarantine_write(qdir, name, sm::msg::envelope_bytes(env));
            if (err.empty())
                spdlog::error("{}: content file {} missing at recovery; envelope saved as {}/{}",
                              env.ta_id, cdb.empty() ? "(invalid id)" : cdb, qdir, name);
            else
                spdlog::error("{}: content file {} missing at recovery; envelope not saved ({})",
                              env.ta_id, cdb.empty() ? "(invalid id)" : cdb, err);
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
