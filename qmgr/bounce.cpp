// Bounces: recipients that failed for good (5xx, or the end of the queue
// lifetime) are collected per transaction and reported to the sender in one
// RFC 3464 DSN, a new transaction from <> queued like any other mail. The
// failed recipients stay open until the DSN is durable, so a crash before
// that repeats the attempt instead of losing the report.
#include "qmgr.hpp"

#include "ids.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace smx::qmgr {

namespace {

// The CDB discipline of SMTPS: temporary name, fdatasync, rename.
int write_cdb(const std::string& path, const std::string& data) {
    const std::string tmp = path + ".tmp";
    std::error_code ec;
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return errno;
    int err = 0;
    for (std::size_t off = 0; off < data.size() && !err;) {
        const ssize_t n = ::write(fd, data.data() + off, data.size() - off);
        if (n < 0 && errno != EINTR) err = errno;
        if (n > 0) off += static_cast<std::size_t>(n);
    }
    if (!err && ::fdatasync(fd) != 0) err = errno;
    if (::close(fd) != 0 && !err) err = errno;
    if (!err && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
    if (err) ::unlink(tmp.c_str());
    return err;
}

} // namespace

void Qmgr::bounce(Ta& ta, std::uint32_t idx, const std::string& relay, dsn::FailedRcpt why) {
    Rcpt& r = ta.rcpts[idx];
    const std::string text = why.code ? std::to_string(why.code) + " " + why.status + " " + why.text
                                      : why.status + " " + why.text;
    if (relay.empty())
        spdlog::info("{}: to=<{}>, status=bounced ({})", ta.id, r.addr, text);
    else
        spdlog::info("{}: to=<{}>, relay={}, delay={:.2f}, status=bounced ({})", ta.id, r.addr,
                     relay, static_cast<double>(sm::now_us() - ta.arrival_us()) / 1e6, text);
    ++counters_.bounced;
    r.state = RcptState::bouncing;
    r.last_error = text;
    if (idx < ta.env->rcpts.size()) why.params = ta.env->rcpts[idx].params;
    auto& list = bounces_[ta.id];
    list.push_back(Bounce{idx, std::move(why)});
    // Everything that fails in this event-loop turn (one RESULT, one due
    // batch) goes into one DSN per transaction.
    if (bounces_.size() == 1 && list.size() == 1)
        asio::post(ex_, [this] { flush_bounces(); });
}

void Qmgr::flush_bounces() {
    auto all = std::exchange(bounces_, {});
    for (auto& [id, list] : all) {
        Ta* ta = queue_.find(id);
        if (!ta) continue;
        if (ta->deleted) {
            bounced(id, list);
        } else if (!dsn::should_bounce(*ta->env)) {
            spdlog::info("{}: sender is null, no bounce", id);
            bounced(id, list);
        } else {
            make_dsn(*ta, std::move(list));
        }
    }
}

// Builds and writes the DSN on the pool, then logs it in IBDB; only when
// that is durable are the failed recipients closed.
void Qmgr::make_dsn(Ta& ta, std::vector<Bounce> list) {
    const std::string dsn_id = sm::new_ta_id();
    const std::string orig_path = sm::cdb_path(spool_, ta.cdb_id(), cfg_.queue.cdb_hashed);
    const std::string path = sm::cdb_path(spool_, dsn_id, cfg_.queue.cdb_hashed);
    std::vector<dsn::FailedRcpt> rcpts;
    for (const auto& b : list) rcpts.push_back(b.why);
    dsn::Report rep;
    rep.reporting_mta = cfg_.server.hostname;
    rep.dsn_id = dsn_id;
    auto env = ta.env;
    struct Written {
        int err = 0;
        std::uint64_t size = 0;
    };
    auto job = [env, rcpts = std::move(rcpts), rep, orig_path, path]() mutable {
        std::string err;
        rep.now_us = sm::now_us();
        // Without the original headers the report still says what failed.
        if (auto h = dsn::read_header_section(orig_path, err)) rep.original_headers = *h;
        const std::string msg = dsn::build(*env, rcpts, rep);
        return Written{write_cdb(path, msg), msg.size()};
    };
    auto done = [this, id = ta.id, dsn_id, env, list = std::move(list)](Written w) mutable {
        auto retry = [this, id](const std::vector<Bounce>& list, const std::string& why) {
            // The recipients wait in DEFEDB and fail (and bounce) again later.
            Ta* t = queue_.find(id);
            if (!t) return;
            for (const auto& b : list) {
                Rcpt& r = t->rcpts[b.idx];
                r.state = RcptState::active;
                r.last_error = why;
                park(*t, b.idx,
                     sm::now_us() + static_cast<std::uint64_t>(backoff(cfg_.queue, 1).count()));
            }
        };
        if (w.err) {
            spdlog::error("{}: cannot write non-delivery notification: {}", id,
                          std::strerror(w.err));
            retry(list, std::string("4.3.0 non-delivery notification not written: ") +
                            std::strerror(w.err));
            return;
        }
        sm::msg::TaCommit d;
        d.ta_id = d.cdb_id = dsn_id;
        d.client_addr = "127.0.0.1";
        d.client_name = "localhost";
        d.helo = cfg_.server.hostname;
        d.rcpts.push_back(sm::msg::Recipient{env->sender, {}});
        d.size = w.size;
        d.arrival_us = sm::now_us();
        queue_.add(d);
        ibdb_.append_transaction(d, [this, id, dsn_id, list = std::move(list),
                                     retry](bool ok, const std::string& error) mutable {
            Ta* dsn = queue_.find(dsn_id);
            if (!ok || !dsn) {
                spdlog::error("{}: non-delivery notification {} not logged: {}", id, dsn_id, error);
                queue_.erase(dsn_id);
                unlink_later(dsn_id);
                retry(list, "4.3.0 non-delivery notification not queued: " + error);
                return;
            }
            dsn->durable = true;
            ++counters_.dsn_sent;
            spdlog::info("{}: sender non-delivery notification: {}", id, dsn_id);
            spdlog::info("{}: from=<>, size={}, nrcpt=1 (queue active)", dsn_id, dsn->size());
            std::vector<std::uint32_t> all{0};
            schedule(*dsn, all);
            bounced(id, list);
        });
    };
    asio::post(workers_, [ex = ex_, job = std::move(job), done = std::move(done)]() mutable {
        asio::post(ex, [done = std::move(done), w = job()]() mutable { done(w); });
    });
}

// The report is safe (or not wanted): the failed recipients are final.
void Qmgr::bounced(const std::string& ta_id, const std::vector<Bounce>& list) {
    Ta* ta = queue_.find(ta_id);
    if (!ta) return;
    for (const auto& b : list) {
        if (ta->rcpts[b.idx].from_defedb) drop_from_defedb(*ta, b.idx);
        else if (!ta->deleted) ibdb_.rcpt_done(ta_id, b.idx);
        queue_.close(*ta, b.idx, RcptState::bounced);
    }
    check_ta(*ta);
}

} // namespace smx::qmgr
