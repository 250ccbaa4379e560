// Intake: TA_COMMIT from SMTPS, checked at the boundary, logged in IBDB and
// acked once durable; and start-up recovery, which is intake from the log.
#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace smx::qmgr {

namespace {

std::vector<std::uint32_t> all_rcpts(const Ta& ta) {
    std::vector<std::uint32_t> idx(ta.rcpts.size());
    for (std::uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
    return idx;
}

void log_queued(const Ta& ta, const char* how) {
    spdlog::info("{}: from=<{}>, size={}, nrcpt={} ({})", ta.id, ta.sender, ta.size,
                 ta.rcpts.size(), how);
}

} // namespace

void Qmgr::on_commit(sm::msg::TaCommit env, std::uint64_t req_id, Send reply) {
    using sm::msg::AckStatus;
    auto answer = [&](AckStatus st, std::string text) {
        reply(sm::msg::encode(sm::msg::TaAck{env.ta_id, st, std::move(text)}, req_id));
    };
    std::string why;
    struct stat st;
    if (!sm::valid_ta_id(env.ta_id)) {
        why = "invalid transaction id";
    } else if (!sm::valid_ta_id(env.cdb_id)) {
        why = "invalid content id";
    } else if (env.rcpts.empty()) {
        why = "no recipients";
    } else if (std::any_of(env.rcpts.begin(), env.rcpts.end(),
                           [](const auto& r) { return r.addr.empty(); })) {
        why = "empty recipient address";
    } else if (::stat(sm::cdb_path(spool_, env.cdb_id, cfg_.queue.cdb_hashed).c_str(), &st) != 0) {
        why = std::string("content file: ") + std::strerror(errno);
    } else if (queue_.find(env.ta_id)) {
        why = "duplicate transaction id";
    }
    if (!why.empty()) {
        // An invalid id is not echoed: it could carry anything into the log.
        spdlog::warn("{}: TA_COMMIT rejected: {}",
                     sm::valid_ta_id(env.ta_id) ? env.ta_id : "(invalid id)", why);
        ++counters_.rejected;
        answer(AckStatus::reject, "Transaction rejected by queue manager: " + why);
        return;
    }
    // Full means the recipients in memory; one transaction always fits into
    // an empty queue so that a huge one cannot be refused forever.
    const bool full = queue_.rcpts() > 0 &&
                      queue_.rcpts() + env.rcpts.size() > cfg_.queue.aq_max_entries;
    if (full || disk_low_ || !accepting_) {
        const char* what = !accepting_ ? "queue manager shutting down"
                           : full      ? "queue full"
                                       : "insufficient disk space";
        spdlog::warn("{}: TA_COMMIT deferred: {}", env.ta_id, what);
        ++counters_.tempfailed;
        answer(AckStatus::tempfail, std::string(what) + ", try again later");
        return;
    }
    queue_.add(env);
    ibdb_.append_transaction(env, [this, id = env.ta_id, req_id, reply = std::move(reply)](
                                      bool ok, const std::string& error) {
        committed(id, req_id, reply, ok, error);
    });
}

void Qmgr::committed(const std::string& id, std::uint64_t req_id, const Send& reply, bool ok,
                     const std::string& error) {
    using sm::msg::AckStatus;
    Ta* ta = queue_.find(id);
    if (!ok || !ta) {
        spdlog::error("{}: envelope log write failed: {}", id, error);
        queue_.erase(id);
        ++counters_.tempfailed;
        reply(sm::msg::encode(
            sm::msg::TaAck{id, AckStatus::tempfail, "queue write error, try again later"}, req_id));
        return;
    }
    reply(sm::msg::encode(sm::msg::TaAck{id, AckStatus::ok, {}}, req_id));
    ta->durable = true;
    ++counters_.received;
    log_queued(*ta, "queue active");
    schedule(*ta, all_rcpts(*ta));
}

// Free space is sampled, not checked per message: statvfs costs more than
// the rest of intake, and the high-water mark needs no precision.
void Qmgr::check_disk() {
    struct statvfs vfs;
    if (::statvfs(spool_.c_str(), &vfs) == 0) {
        const auto free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
        const bool low = free < cfg_.queue.min_free_space;
        if (low != disk_low_)
            spdlog::warn("spool {}: {} bytes free, intake {}", spool_, free,
                         low ? "paused" : "resumed");
        disk_low_ = low;
    }
    disk_timer_.expires_after(std::chrono::seconds(1));
    disk_timer_.async_wait([this](boost::system::error_code ec) {
        if (!ec) check_disk();
    });
}

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
            ibdb_.ta_done(env.ta_id);
            continue;
        }
        Ta* ta = queue_.add(env);
        if (!ta) continue;  // the log held it twice; the first copy counts
        ta->durable = true;
        std::vector<std::uint32_t> todo;
        bool finished = false;
        for (std::uint32_t i = 0; i < ta->rcpts.size(); ++i) {
            if (i < rt.rcpt_done.size() && rt.rcpt_done[i])
                finished = queue_.finish(*ta, i, RcptState::done);
            else
                todo.push_back(i);
        }
        if (finished) {
            finish_ta(*ta);
            continue;
        }
        ++restored;
        log_queued(*ta, "queue active, recovered");
        schedule(*ta, todo);
    }
    if (!tas.empty())
        spdlog::info("recovery: {} transactions back in the active queue", restored);
}

} // namespace smx::qmgr
