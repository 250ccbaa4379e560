// The bouncer (see bounce.hpp).
#include "qmgr/bounce.hpp"

#include "libsm/content_file.hpp"
#include "libsm/dsn_params.hpp"
#include "libsm/ids.hpp"
#include "libsm/log.hpp"

#include <spdlog/spdlog.h>

#include <cstring>

namespace smx::qmgr {

Bouncer::Bouncer(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
                 ActiveQueue& queue, Ibdb& ibdb, Reaper& reaper, Hooks hooks,
                 const smx::Clock& clock)
    : cfg_(cfg), clock_(clock), ex_(std::move(ex)), workers_(workers), queue_(queue), ibdb_(ibdb),
      reaper_(reaper), hooks_(std::move(hooks)), store_(smx::content::store_for(cfg)),
      sync_names_(smx::content::sync_names(cfg)) {}

void Bouncer::bounce(Ta& ta, std::uint32_t idx, const Attempt& at, dsn::FailedRcpt why) {
    log_status(ta, idx, at, "bounced", why.reply, clock_.now_us());
    ++bounced_;
    queue_.bounce_begin(ta, idx, why.reply, at.relay);
    report(bounces_, ta, idx, std::move(why));
}

// A recipient deferred again after delay_warning_time: its sender hears
// once (the flag travels with the recipient into DEFEDB), unless the
// sender is null. The warning is not waited for: lost in a crash, it is
// not sent again.
void Bouncer::warn_if_late(Ta& ta, std::uint32_t idx, const std::string& relay) {
    const auto after = std::chrono::duration_cast<std::chrono::microseconds>(
        cfg_.queue.delay_warning_time);
    const Rcpt& r = ta.rcpt(idx);
    const std::uint64_t waited = smx::elapsed_us(ta.arrival_us(), clock_.now_us());
    if (after.count() == 0 || r.warned() || no_dsn_reason(ta) || !notify(ta, idx).delay ||
        waited < static_cast<std::uint64_t>(after.count()))
        return;
    queue_.mark_warned(ta, idx);
    auto why = dsn::failed_rcpt(r.addr(), r.last_reply(), relay);
    why.action = dsn::Action::delayed;
    why.last_attempt_us = clock_.now_us();
    report(delays_, ta, idx, std::move(why));
}

void Bouncer::relayed(Ta& ta, std::uint32_t idx, const std::string& relay,
                      const smx::msg::Reply& reply, bool peer_dsn) {
    if (peer_dsn || !notify(ta, idx).success || no_dsn_reason(ta)) return;
    auto why = dsn::failed_rcpt(ta.rcpt(idx).addr(), reply, relay);
    why.action = dsn::Action::relayed;
    why.params = ta.env->rcpts.at(idx).params;
    why.last_attempt_us = clock_.now_us();
    // Now, not at the end of the turn: once sent, the transaction may leave
    // memory. Its content is read on the pool, normally before the reaper's
    // unlink (which waits for IBDB's ta_done); if not, the notice goes out
    // without the original's header section.
    std::vector<Bounce> one;
    one.push_back(Bounce{idx, std::move(why)});
    tasks_.spawn(ex_, queue_dsn(ta.id, ta.env, std::move(one), Kind::success), "success notice");
}

smx::dsn::Notify Bouncer::notify(const Ta& ta, std::uint32_t idx) {
    return idx < ta.env->rcpts.size() ? smx::dsn::notify(ta.env->rcpts[idx].params) : smx::dsn::Notify{};
}

const char* Bouncer::no_dsn_reason(const Ta& ta) const {
    if (!dsn::should_bounce(*ta.env)) return "sender is null";
    if (cfg_.queue.bounce_untrusted) return nullptr;
    return cfg_.server.in_relay_networks(ta.env->client_addr)
               ? nullptr
               : "client outside relay_networks (bounce_untrusted = false)";
}

void Bouncer::report(std::map<std::string, std::vector<Bounce>>& to, Ta& ta, std::uint32_t idx,
                  dsn::FailedRcpt why) {
    if (idx < ta.env->rcpts.size()) why.params = ta.env->rcpts[idx].params;
    // Everything that fails in this event-loop turn (one RESULT, one due
    // batch) goes into one DSN per transaction.
    if (bounces_.empty() && delays_.empty()) tasks_.spawn(ex_, flush(), "bounce flush");
    to[ta.id].push_back(Bounce{idx, std::move(why)});
}

asio::awaitable<void> Bouncer::flush() {
    for (auto& [id, list] : std::exchange(delays_, {}))
        if (Ta* ta = queue_.find(id); ta && !ta->deleted())
            tasks_.spawn(ex_, queue_dsn(id, ta->env, std::move(list), Kind::delay), "delay warning");
    for (auto& [id, list] : std::exchange(bounces_, {})) {
        Ta* ta = queue_.find(id);
        if (!ta) continue;
        if (ta->deleted()) {
            hooks_.bounced(id, list);
        } else if (const char* why = no_dsn_reason(*ta)) {
            spdlog::info("{}: no bounce: {}", id, why);
            hooks_.bounced(id, list);
        } else {
            // NOTIFY without FAILURE (or NEVER): that recipient is final now.
            std::vector<Bounce> quiet, loud;
            for (auto& b : list) (notify(*ta, b.idx).failure ? loud : quiet).push_back(std::move(b));
            if (!loud.empty())
                tasks_.spawn(ex_, queue_dsn(id, ta->env, std::move(loud), Kind::failure), "bounce");
            if (!quiet.empty()) {
                spdlog::info("{}: no bounce for {} recipient(s): NOTIFY without FAILURE", id,
                             quiet.size());
                hooks_.bounced(id, quiet);
            }
        }
    }
    co_return;
}

// Writes the DSN, logs it in IBDB and schedules it. A delay warning is not
// waited for. The recipients of a non-delivery report are closed only once
// it is durable; else they wait in DEFEDB and fail (and bounce) again later.
// (The big values live in write_dsn and dsn_commit: a coroutine frame over
// 1 KiB is not recycled, and GCC 12 misreads its delete, PR 109224.)
asio::awaitable<void> Bouncer::queue_dsn(std::string id,
                                         std::shared_ptr<const smx::msg::TaCommit> env,
                                         std::vector<Bounce> list, Kind k) {
    // As postfix's bounce names them in its log.
    const char* kind = k == Kind::failure ? "non-delivery"
                       : k == Kind::delay ? "delay"
                                          : "delivery status";
    const auto answer = [&](const std::string& error) {
        if (k != Kind::failure) return;
        if (error.empty()) hooks_.bounced(id, list);
        else hooks_.failed(id, list, error);
    };
    const std::string dsn_id = smx::new_ta_id();
    const auto [err, size] = co_await write_dsn(env, list, dsn_id, k);
    if (err) {
        spdlog::error("{}: cannot write {} notification: {}", id, kind, std::strerror(err));
        co_return answer(std::string(kind) + " notification not written: " + std::strerror(err));
    }
    // Durable in IBDB (the group commit) before it counts as queued.
    auto d = dsn_commit(dsn_id, env->sender, size);
    const auto logged = co_await ibdb_.append(std::move(d));
    Ta* dsn = queue_.find(dsn_id);
    if (!std::get<0>(logged) || !dsn) {
        const std::string& error = std::get<1>(logged);
        spdlog::error("{}: {} notification {} not logged: {}", id, kind, dsn_id, error);
        queue_.abandon(dsn_id);
        reaper_.discard(dsn_id);
        co_return answer(std::string(kind) + " notification not queued: " + error);
    }
    ++dsn_sent_;
    smx::log_as(smx::LogAs::bounce).info("{}: sender {} notification: {}", id, kind, dsn_id);
    spdlog::info("{}: from=<>, size={}, nrcpt=1 (queue active)", dsn_id, dsn->size());
    hooks_.schedule(*dsn);
    answer({});
}

// On the pool: the report (with the original's header section when it can
// be read) written as the content file of dsn_id.
asio::awaitable<std::pair<int, std::uint64_t>> Bouncer::write_dsn(
    std::shared_ptr<const smx::msg::TaCommit> env, const std::vector<Bounce>& list,
    const std::string& dsn_id, Kind kind) {
    std::vector<dsn::FailedRcpt> rcpts;
    for (const auto& b : list) rcpts.push_back(b.why);
    dsn::Report rep;
    rep.reporting_mta = cfg_.server.hostname;
    rep.dsn_id = dsn_id;
    rep.now_us = clock_.now_us();
    // RET=FULL returns the whole message on failure, but only to a client we
    // relay for: others (anyone can forge their sender) get headers only.
    const bool full = kind == Kind::failure && smx::dsn::ret_full(env->params) &&
                      cfg_.server.in_relay_networks(env->client_addr);
    auto job = [env, rcpts = std::move(rcpts), rep = std::move(rep), full, sync_name = sync_names_,
                store = store_, path = smx::content::file_path(store_.dir, dsn_id, store_.hashed)]() mutable {
        std::string err;
        smx::content::Body body;
        // Without the original headers the report still says what failed.
        if (body.open(store, env->content_id, env->ta_id, env->size) == 0) {
            // Over max_returned_message only the headers go back.
            if (auto m = full ? dsn::read_message(body, err) : std::nullopt) rep.original_message = *m;
            else if (auto h = dsn::read_header_section(body, err)) rep.original_headers = *h;
        }
        const std::string msg = dsn::build(*env, rcpts, rep);
        return std::make_pair(smx::content::write_durable(path, msg, smx::content::file_mode, sync_name),
                              static_cast<std::uint64_t>(msg.size()));
    };
    co_return co_await run_on(workers_.get_executor(), std::move(job));
}

// The DSN's transaction, from <> to the original sender, in the active queue.
smx::msg::TaCommit Bouncer::dsn_commit(const std::string& dsn_id, const std::string& to,
                                      std::uint64_t size) {
    smx::msg::TaCommit d;
    d.ta_id = d.content_id = dsn_id;
    d.client_addr = "127.0.0.1";
    d.client_name = "localhost";
    d.helo = cfg_.server.hostname;
    d.rcpts.push_back(smx::msg::Recipient{to, {}});
    d.size = size;
    d.arrival_us = clock_.now_us();
    queue_.admit(d);
    return d;
}

} // namespace smx::qmgr
