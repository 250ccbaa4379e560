// Intake: TA_COMMIT from SMTPS, checked at the boundary, logged in IBDB and
// acked once durable; and start-up recovery, which is intake from the log.
#include "qmgr/qmgr.hpp"

#include "libsm/await.hpp"
#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"

#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace smx::qmgr {

namespace {

std::vector<std::uint32_t> all_rcpts(const Ta& ta) {
    std::vector<std::uint32_t> idx(ta.rcpts().size());
    for (std::uint32_t i = 0; i < idx.size(); ++i) idx[i] = i;
    return idx;
}

// SMTPS answers a tempfail whose text starts with 4.3.1 with 452.
constexpr const char* no_storage = "4.3.1 Insufficient system storage";

} // namespace

void Qmgr::on_commit(smx::msg::TaCommit env, std::uint64_t req_id, Send reply, From from) {
    if (from == From::pickup && smx::valid_ta_id(env.ta_id) &&
        smx::ta_id_stream(env.ta_id) == smx::pickup_id_stream && !queue_.find(env.ta_id)) {
        tasks_.spawn(ex_, intake_pickup(std::move(env), req_id, std::move(reply)), "pickup commit");
        return;
    }
    intake(std::move(env), req_id, std::move(reply), from);
}

// smx-pickup resumes a commit it did not see answered with the same id: one
// that went through may have left memory for DEFEDB since.
asio::awaitable<void> Qmgr::intake_pickup(smx::msg::TaCommit env, std::uint64_t req_id,
                                          Send reply) {
    // Named before it is awaited (smx::run_on says why).
    auto has = [id = env.ta_id](Defedb& db) { return db.has_ta(id); };
    const auto known = co_await dbq_.run(std::move(has));
    if (!known) {
        ++counters_.tempfailed;
        reply(smx::msg::encode(smx::msg::TaAck{env.ta_id, smx::msg::AckStatus::tempfail,
                                             "4.3.0 deferred queue unavailable"},
                              req_id));
        co_return;
    }
    if (*known) {
        spdlog::warn("{}: TA_COMMIT rejected: {} (in the deferred queue)", env.ta_id,
                     smx::msg::duplicate_ta);
        ++counters_.rejected;
        reply(smx::msg::encode(
            smx::msg::TaAck{env.ta_id, smx::msg::AckStatus::reject,
                           "Transaction rejected by queue manager: " +
                               std::string(smx::msg::duplicate_ta)},
            req_id));
        co_return;
    }
    intake(std::move(env), req_id, std::move(reply), From::pickup);
}

void Qmgr::intake(smx::msg::TaCommit env, std::uint64_t req_id, Send reply, From from) {
    using smx::msg::AckStatus;
    auto answer = [&](AckStatus st, std::string text) {
        reply(smx::msg::encode(smx::msg::TaAck{env.ta_id, st, std::move(text)}, req_id));
    };
    std::string why;
    const auto ref = smx::content::parse_segment_ref(env.content_id);
    if (!smx::valid_ta_id(env.ta_id)) {
        why = "invalid transaction id";
    } else if (const unsigned stream = smx::ta_id_stream(env.ta_id);
               (stream == smx::pickup_id_stream) != (from == From::pickup) ||
               stream == smx::qmgr_id_stream) {
        // Our own ids (DSNs), and pickup's: SMTPS and smx-pickup may only
        // ever name transactions they made.
        why = "transaction id of another stream";
    } else if (!smx::content::valid_content_id(env.content_id)) {
        why = "invalid content id";
    } else if (!ref && env.content_id != env.ta_id) {
        // A content file is named by its transaction: never another's.
        why = "content file of another transaction";
    } else if (ref && env.size > smx::content::segment_record_max) {
        why = "larger than a content segment record can be";
    } else if (env.rcpts.empty()) {
        why = "no recipients";
    } else if (std::any_of(env.rcpts.begin(), env.rcpts.end(),
                           [](const auto& r) { return r.addr.empty(); })) {
        why = "empty recipient address";
    } else if (queue_.find(env.ta_id)) {
        why = smx::msg::duplicate_ta;
    }
    if (why.empty()) {
        // Gone (the orphan sweep took a file whose commit came very late, or
        // an operator; a segment too old to be named), or not what SMTPS says
        // it is: SMTPS's own mail, never accepted. The client may send it
        // again; a content file that is no message of SMTPS's (a link, a
        // FIFO, another size or owner) is not opened past the check.
        std::string gone;
        if (ref) {
            gone = segments_.check(*ref, env.ta_id, env.size);
        } else {
            std::string bad;
            const smx::content::Expect smtps_file{store_.writers.smtps, store_.writers.smtps,
                                                 env.size, true};
            if (const int err = smx::content::check_read(store_.dir, env.content_id, store_.hashed,
                                                        smtps_file, bad))
                gone = (err == ENOENT ? "Content file missing: " : "Content file: ") + bad;
        }
        if (!gone.empty()) {
            spdlog::warn("{}: TA_COMMIT deferred: {}", env.ta_id, gone);
            ++counters_.tempfailed;
            answer(AckStatus::tempfail, "4.3.0 " + gone);
            return;
        }
    }
    if (!why.empty()) {
        // An invalid id is not echoed: it could carry anything into the log.
        spdlog::warn("{}: TA_COMMIT rejected: {}",
                     smx::valid_ta_id(env.ta_id) ? env.ta_id : "(invalid id)", why);
        ++counters_.rejected;
        answer(AckStatus::reject, "Transaction rejected by queue manager: " + why);
        return;
    }
    // Full means the recipients in memory; one transaction always fits into
    // an empty queue so that a huge one cannot be refused forever.
    const bool full = queue_.rcpts() > 0 &&
                      queue_.rcpts() + env.rcpts.size() > cfg_.queue.aq_max_entries;
    // Checked last: once it says yes, the message's deferral copy is counted.
    const std::string short_dir = full || !accepting_ ? std::string() : space_.admit(env);
    if (full || !short_dir.empty() || !accepting_) {
        const std::string what = !accepting_ ? "queue manager shutting down"
                                 : full      ? "queue full"
                                             : "spool low on free space (" + short_dir + ")";
        spdlog::warn("{}: TA_COMMIT deferred: {}", env.ta_id, what);
        ++counters_.tempfailed;
        answer(AckStatus::tempfail,
               accepting_ ? no_storage : "4.3.2 queue manager shutting down, try again later");
        return;
    }
    queue_.admit(env);
    ibdb_.append_transaction(env, [this, id = env.ta_id, req_id, reply = std::move(reply)](
                                      bool ok, const std::string& error) {
        committed(id, req_id, reply, ok, error);
    });
}

void Qmgr::committed(const std::string& id, std::uint64_t req_id, const Send& reply, bool ok,
                     const std::string& error) {
    using smx::msg::AckStatus;
    Ta* ta = queue_.find(id);
    if (!ok || !ta) {
        // Nothing will ever name the content: it goes now (SMTPS removes
        // it too on a tempfail; whoever comes second finds nothing).
        spdlog::error("{}: envelope log write failed: {}", id, error);
        if (ta) reaper_.discard(ta->content_id());
        queue_.abandon(id);
        ++counters_.tempfailed;
        reply(smx::msg::encode(smx::msg::TaAck{id, AckStatus::tempfail, no_storage}, req_id));
        return;
    }
    reply(smx::msg::encode(smx::msg::TaAck{id, AckStatus::ok, {}}, req_id));
    ++counters_.received;
    counters_.ack_seconds.observe(seconds_since(ta->arrival_us(), clock_.now_us()));
    spdlog::info("{}: from=<{}>, size={}, nrcpt={} (queue active)", id, ta->sender(), ta->size(),
                 ta->rcpts().size());
    start(*ta, all_rcpts(*ta));
}

// Once a second on the pool (a directory list, and perhaps an fallocate):
// the segments listed again, missing reserve files made where there is
// room, and a log line when intake stops or starts being refused for space.
// The check itself is at every TA_COMMIT (DiskSpace::admit).
asio::awaitable<void> Qmgr::watch_disk() {
    while (accepting_) {
        const auto fullest =
            co_await run_on(workers_.get_executor(), [this] { return space_.watch(); });
        if (fullest && fullest->short_of_space != disk_short_)
            spdlog::warn("spool {}: {} bytes free, intake {}", fullest->dir, fullest->free,
                         fullest->short_of_space ? "paused" : "resumed");
        if (fullest) disk_short_ = fullest->short_of_space;
        if (!accepting_) break;
        disk_timer_.expires_after(std::chrono::seconds(1));
        auto [ec] = co_await disk_timer_.async_wait(smx::await_tuple);
        if (ec) break;  // stop()
    }
}

} // namespace smx::qmgr
