// milter.non_smtpd_milters for mail from the sendmail command: one chain
// per message, shown the message as postfix's cleanup shows local mail (a
// client localhost [127.0.0.1], HELO localhost, MAIL, each RCPT, DATA, the
// content file's header fields, body, end of message), before the commit.
// The content file is read on the event loop: it waits for nothing else
// while one message is handled.
#include "pickup/pickup.hpp"

#include "libsm/await.hpp"
#include "libsm/domain.hpp"
#include "libsm/fd.hpp"
#include "libsm/milter_edits.hpp"
#include "libsm/milters.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::pickup {
namespace {

namespace m = smx::milter;
using smx::msg::AckStatus;

constexpr std::size_t chunk = 64 * 1024;
const std::string local_addr = "127.0.0.1";
const std::string local_name = "localhost";

// "550 5.7.1 text" as the ack's text: without the reply code.
std::string ack_text(const std::string& reply) {
    return reply.size() > 4 ? reply.substr(4) : reply;
}

} // namespace

// GCC 12 warns falsely that this coroutine's frame is freed with a
// mismatched operator delete (GCC PR 109224, fixed in GCC 13; as
// perf/sink_session.cpp); Boost.Asio allocates and frees the frame itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
asio::awaitable<std::optional<Pickup::Answer>> Pickup::milter(Taken& t,
                                                               smx::msg::TaCommit& ta) {
    const auto cfg = milters_;
    if (cfg->non_smtpd_milters.empty()) co_return std::nullopt;
    if (t.resumed) {
        // Its content file may hold their edits already, its envelope's were lost.
        spdlog::warn("{}: commit resumed after a restart: not shown to the milters again", t.id);
        co_return std::nullopt;
    }
    const auto answer = [&t](AckStatus s, const std::string& reply) {
        return Answer{smx::msg::TaAck{t.id, s, ack_text(reply)}, "milter"};
    };
    std::string why;
    auto open = [this, &t, &why] { return dir_.open_content(t, why); };
    smx::Fd content(co_await smx::run_on(pool_.get_executor(), std::move(open)));
    if (!content) {
        spdlog::error("{}: cannot read the content for the milters: {}", t.id, why);
        co_return answer(AckStatus::tempfail, "451 4.3.0 Error: queue file read error");
    }
    std::string rcpt_now;  // {rcpt_addr} while a RCPT is asked
    auto macros = [&](std::string_view n) -> std::optional<std::string> {
        if (n == "j" || n == "daemon_name") return hostname_;
        if (n == "v") return std::string("smx");
        if (n == "_") return local_name + " [" + local_addr + "]";
        if (n == "client_addr") return local_addr;
        if (n == "client_name" || n == "client_ptr") return local_name;
        if (n == "i") return t.id;
        if (n == "mail_addr") return ta.sender;
        if (n == "mail_host") return std::string(smx::domain_part(ta.sender));
        if (n == "mail_mailer") return std::string("local");
        if (!rcpt_now.empty()) {
            if (n == "rcpt_addr") return rcpt_now;
            if (n == "rcpt_host") return std::string(smx::domain_part(rcpt_now));
        }
        return std::nullopt;
    };
    smx::msg::MilterFailureCounts failures{};
    m::Milters chain(io_.get_executor(), *cfg, cfg->non_smtpd_milters, macros, failures);
    std::string hold;
    const auto asked = [&hold](const m::MilterVerdict& v) {
        if (!v.hold.empty()) hold = v.hold;
        return v.kind == m::MilterVerdict::cont;
    };
    m::MilterVerdict v = co_await chain.connect(local_name, m::Family::inet, 0, local_addr);
    if (asked(v)) v = co_await chain.helo(local_name);
    if (asked(v)) v = co_await chain.mail(m::command_args(ta.sender, ta.params));
    for (const auto& r : ta.rcpts) {
        if (!asked(v)) break;
        rcpt_now = r.addr;
        v = co_await chain.rcpt(m::command_args(r.addr, r.params));
    }
    rcpt_now.clear();
    if (asked(v)) v = co_await chain.data();
    m::MilterMessage msg;
    if (asked(v)) {
        auto read = [fd = content.get()](std::uint64_t at, std::string& piece) {
            piece.resize(chunk);
            ssize_t n;
            do n = ::pread(fd, piece.data(), chunk, static_cast<off_t>(at));
            while (n < 0 && errno == EINTR);
            piece.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
            return n >= 0;
        };
        // A replaced body within what a message may be, as in SMTPS.
        msg = co_await chain.message(read, static_cast<std::size_t>(dir_.max_size()));
        v = msg.verdict;
        asked(v);
    }
    co_await chain.quit();
    // Counted in QMGR with SMTPS's (smx_milter_failures_total).
    if (failures != smx::msg::MilterFailureCounts{}) {
        smx::msg::SmtpsLoad report;
        report.milter_failures = failures;
        qmgr_->send(smx::msg::encode(report));
    }
    if (msg.read_failed) {
        spdlog::error("{}: cannot read the content back for the milters: {}", t.id,
                      std::strerror(errno));
        co_return answer(AckStatus::tempfail, "451 4.3.0 Error: queue file read error");
    }
    switch (v.kind) {
    case m::MilterVerdict::reject:
        spdlog::info("{}: milter-reject: uid={} from=<{}>: {}", t.id, t.env.uid, ta.sender,
                     v.reply);
        // Queued as it came and bounced to its sender by QMGR, as postfix's
        // cleanup bounces local mail: the user's sendmail has long returned.
        ta.refused = v.reply;
        co_return std::nullopt;
    case m::MilterVerdict::tempfail:
        spdlog::info("{}: milter-reject: uid={} from=<{}>: {}", t.id, t.env.uid, ta.sender,
                     v.reply);
        co_return answer(AckStatus::tempfail, v.reply);
    case m::MilterVerdict::discard: {
        Answer a = answer(AckStatus::ok, "");
        a.discard = true;
        co_return a;
    }
    case m::MilterVerdict::cont: break;
    }
    if (!hold.empty()) {
        ta.hold = "milter: " + hold;
        spdlog::info("{}: milter-hold: uid={} from=<{}>: {}", t.id, t.env.uid, ta.sender, hold);
    }
    if (v.edits.empty()) co_return std::nullopt;
    m::Envelope env{ta.sender, ta.params, ta.rcpts};
    if (const auto r = m::edit_envelope(env, v.edits, *rewrite_); !r.ok()) {
        if (!r.warning.empty()) spdlog::warn("{}: {}", t.id, r.warning);
        co_return answer(AckStatus::tempfail, r.reply);
    }
    if (env.rcpts.empty())
        co_return answer(AckStatus::reject,
                         "554 5.7.1 Error: the milters removed every recipient");
    // Refused for good: a retry would grow it as much.
    if (smx::msg::envelope_size(env.sender, env.params, ta.helo, env.rcpts) > smx::msg::max_envelope)
        co_return answer(AckStatus::reject, "552 5.5.3 Error: too many recipients (the "
                                            "milters' envelope is too large)");
    ta.sender = std::move(env.sender);
    ta.params = std::move(env.params);
    ta.rcpts = std::move(env.rcpts);
    if (!m::edits_content(v.edits)) co_return std::nullopt;
    std::uint64_t header_bytes = msg.blank_line ? 2 : 0;
    for (const auto& f : msg.fields) header_bytes += f.size();
    auto fields = msg.fields;
    m::edit_headers(fields, v.edits);
    const auto body = m::replaced_body(v.edits);
    std::string head;
    for (const auto& f : fields) head += f;
    if (msg.blank_line || body) head += "\r\n";
    content = smx::Fd();
    std::string err;
    auto replace = [this, &t, &head, &body, header_bytes, &err] {
        err = dir_.replace_content(t, head, body, header_bytes);
    };
    co_await smx::run_on(pool_.get_executor(), std::move(replace));
    if (!err.empty()) {
        spdlog::error("{}: {}", t.id, err);
        co_return answer(AckStatus::tempfail, "451 4.3.0 Error: queue file write error");
    }
    co_return std::nullopt;
}
#pragma GCC diagnostic pop

} // namespace smx::pickup
