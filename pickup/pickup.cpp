#include "pickup/pickup.hpp"

#include "libsm/address.hpp"
#include "libsm/await.hpp"
#include "libsm/messages.hpp"
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>
#include <sys/inotify.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <unordered_set>

namespace smx::pickup {
namespace {

using namespace std::chrono_literals;

constexpr auto ack_timeout = 60s;
constexpr auto scan_interval = 60s;
constexpr auto retry_interval = 10s;
// A link, as SMTPS on a message: a QMGR with a queue, or a disk, that
// stays full is retried, never in a loop.
constexpr int exit_tempfail = 75;

} // namespace

Pickup::Pickup(asio::io_context& io, MaildropDir& dir, std::shared_ptr<smx::Channel> qmgr,
               asio::thread_pool& pool, std::shared_ptr<const smx::Rewriter> rewrite,
               std::shared_ptr<const smx::MilterConfig> milters, std::string hostname)
    : io_(io), dir_(dir), qmgr_(std::move(qmgr)), pool_(pool), rewrite_(std::move(rewrite)),
      milters_(std::move(milters)), hostname_(std::move(hostname)), events_(io), wake_(io) {}

void Pickup::watch() {
    const int fd = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (fd < 0) throw std::runtime_error(std::string("inotify_init1: ") + std::strerror(errno));
    events_.assign(fd);
    // smx-postdrop renames a finished file into its final name.
    if (::inotify_add_watch(fd, dir_.path().c_str(), IN_MOVED_TO | IN_ONLYDIR) < 0)
        throw std::runtime_error("inotify_add_watch " + dir_.path() + ": " + std::strerror(errno));
    asio::co_spawn(io_, read_events(), smx::crash_on_exception("pickup inotify"));
}

void Pickup::stop() {
    stopping_ = true;
    wake_.cancel();
    boost::system::error_code ec;
    events_.close(ec);
}

asio::awaitable<void> Pickup::read_events() {
    // Only that something came matters: the listing finds what.
    char buf[4096];
    for (;;) {
        auto [ec, n] = co_await events_.async_read_some(asio::buffer(buf), smx::await_tuple);
        if (ec) co_return;  // closed by stop()
        changed_ = true;
        // A file given back (renamed into the maildrop) must not end the
        // pause before its retry: that would retry it at once, in a loop.
        if (!retry_soon_) wake_.cancel();
    }
}

asio::awaitable<int> Pickup::run() {
    // Each job is named before it is awaited (smx::run_on says why).
    auto list = [this] { return dir_.list(); };
    const auto first = co_await smx::run_on(pool_.get_executor(), list);
    for (const auto& name : first.committing) {
        if (stopping_) co_return 0;
        auto resume = [this, name] { return dir_.resume(name); };
        auto o = co_await smx::run_on(pool_.get_executor(), std::move(resume));
        if (!co_await handle(std::move(o))) co_return exit_tempfail;
    }
    while (!stopping_) {
        changed_ = false;
        retry_soon_ = false;
        const auto listing = co_await smx::run_on(pool_.get_executor(), list);
        for (const auto& name : listing.ready) {
            if (stopping_ || retry_soon_) break;
            auto take = [this, name] { return dir_.take(name); };
            auto o = co_await smx::run_on(pool_.get_executor(), std::move(take));
            if (!co_await handle(std::move(o))) co_return exit_tempfail;
        }
        if (changed_ && !retry_soon_) continue;
        wake_.expires_after(retry_soon_ ? retry_interval : scan_interval);
        co_await wake_.async_wait(smx::await_tuple);
    }
    co_return 0;
}

asio::awaitable<bool> Pickup::handle(Outcome o) {
    using Kind = Outcome::Kind;
    if (o.kind == Kind::done) spdlog::info("{}", o.why);
    if (o.kind == Kind::failed) {
        spdlog::error("maildrop: {}; trying again in {} s", o.why, retry_interval.count());
        retry_soon_ = true;
    }
    if (o.kind != Kind::taken) co_return true;
    Taken& t = *o.taken;
    const auto answer = co_await commit(t);
    if (!answer) co_return false;
    const smx::msg::TaAck* ack = &answer->ack;
    using smx::msg::AckStatus;
    auto done = [this, &t] { dir_.done(t); };
    if (answer->discard) {
        co_await smx::run_on(pool_.get_executor(), std::move(done));
        spdlog::info("{}: milter-discard: uid={} from=<{}>: milter triggers DISCARD action", t.id,
                     t.env.uid, t.env.sender);
    } else if (ack->status == AckStatus::ok) {
        smx::test_panic_point("acked");
        co_await smx::run_on(pool_.get_executor(), std::move(done));
        spdlog::info("{}: uid={} from=<{}>", t.id, t.env.uid, t.env.sender);
    } else if (ack->status == AckStatus::reject &&
               ack->text.find(smx::msg::duplicate_ta) != std::string::npos) {
        // Resumed: the commit an earlier run did not see answered went through.
        co_await smx::run_on(pool_.get_executor(), std::move(done));
        spdlog::info("{}: uid={} from=<{}>: already queued", t.id, t.env.uid, t.env.sender);
    } else if (ack->status == AckStatus::reject) {
        auto refused = [this, &t, why = "refused by " + answer->by + ": " + ack->text] {
            dir_.refused(t, why);
        };
        co_await smx::run_on(pool_.get_executor(), std::move(refused));
    } else {
        spdlog::warn("{}: uid={} from=<{}>: deferred by {} ({}); trying again in {} s", t.id,
                     t.env.uid, t.env.sender, answer->by, ack->text, retry_interval.count());
        auto give_back = [this, &t] { dir_.give_back(t); };
        co_await smx::run_on(pool_.get_executor(), std::move(give_back));
        retry_soon_ = true;
    }
    co_return true;
}

std::optional<smx::msg::TaAck> Pickup::rewrite(const Taken& t, smx::msg::TaCommit& ta) const {
    using smx::msg::AckStatus;
    const auto refused = [&](const smx::RewriteResult& r) {
        if (!r.warning.empty()) spdlog::warn("{}: {}", t.id, r.warning);
        // "451 4.3.0 <a>: ...": the ack's text is without the reply code.
        return smx::msg::TaAck{t.id, AckStatus::tempfail, r.reply.substr(4)};
    };
    ta.sender = t.env.sender;
    if (auto r = rewrite_->sender(ta.sender); !r.ok()) return refused(r);
    std::vector<smx::msg::Recipient> to;
    for (const auto& rcpt : t.env.rcpts)
        if (auto r = rewrite_->recipient(rcpt, {}, to); !r.ok()) return refused(r);
    // An alias may name a recipient given as well: one copy.
    std::unordered_set<std::string> keys;
    for (auto& r : to)
        if (keys.insert(smx::address_key(r.addr)).second) ta.rcpts.push_back(std::move(r));
    if (smx::msg::envelope_size(ta.sender, ta.params, ta.helo, ta.rcpts) > smx::msg::max_envelope)
        return smx::msg::TaAck{t.id, AckStatus::reject,
                               "5.5.3 too many recipients after alias expansion"};
    return std::nullopt;
}

asio::awaitable<std::optional<Pickup::Answer>> Pickup::commit(Taken& t) {
    smx::msg::TaCommit ta;
    ta.ta_id = t.id;
    // As QMGR's own DSNs: local mail, from this machine.
    ta.client_addr = "127.0.0.1";
    ta.client_name = "localhost";
    ta.helo = "localhost";
    ta.params = t.eight_bit ? "BODY=8BITMIME" : "";
    if (auto refused = rewrite(t, ta)) co_return Answer{*refused};
    if (auto refused = co_await milter(t, ta)) co_return refused;
    ta.content_id = t.id;
    ta.size = t.size;
    ta.arrival_us = t.env.arrival_us;
    const std::uint64_t req = ++next_req_;
    qmgr_->send(smx::msg::encode(ta, req));
    smx::test_panic_point("commit_sent");
    while (auto f = co_await smx::read_within(*qmgr_, ack_timeout)) {
        std::string err;
        auto ack = f->hdr.type == smx::msg::TA_ACK ? smx::msg::decode<smx::msg::TaAck>(*f, err)
                                                  : std::nullopt;
        if (!ack) {
            spdlog::error("qmgr: protocol error: {}",
                          err.empty() ? "record type " + std::to_string(f->hdr.type) : err);
            break;
        }
        if (f->hdr.req_id == req) co_return Answer{std::move(*ack)};
    }
    spdlog::error("{}: no TA_ACK from qmgr; exiting, the commit is resumed at the next start", t.id);
    co_return std::nullopt;
}

} // namespace smx::pickup
