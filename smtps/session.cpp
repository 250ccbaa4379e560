// The SMTP dialogue of a session (RFC 5321): greeting, commands, content,
// commit. The milters' steps are in session_milter.cpp, the policy
// services' in session_policy.cpp.
#include "smtps/session.hpp"

#include "libsm/ids.hpp"
#include "libsm/log.hpp"
#include "libsm/messages.hpp"
#include "libsm/tls.hpp"
#include "smtps/command.hpp"
#include "smtps/policy.hpp"
#include "smtps/session_state.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::smtps {
namespace {

// DATA is read in chunks of this size: lines of any length pass through.
constexpr std::size_t data_chunk = 64 * 1024;
// How long to wait for the client's close_notify after ours.
constexpr auto close_notify_timeout = std::chrono::seconds(2);

// The bound on reading message content (DATA, or one BDAT chunk):
// data_timeout, plus the time its bytes may take at min_data_rate. Each
// read also has data_timeout.
class DataClock {
public:
    explicit DataClock(const smx::ServerConfig& cfg) : cfg_(cfg) {}
    void received(std::size_t n) { received_ += n; }
    std::chrono::steady_clock::duration left() const {
        using std::chrono::steady_clock;
        if (cfg_.min_data_rate == 0) return cfg_.data_timeout;
        const auto allowed = std::chrono::duration_cast<steady_clock::duration>(
            cfg_.data_timeout + std::chrono::milliseconds(received_ * 1000 / cfg_.min_data_rate));
        return std::min<steady_clock::duration>(cfg_.data_timeout,
                                                start_ + allowed - steady_clock::now());
    }

private:
    const smx::ServerConfig& cfg_;
    const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
    std::uint64_t received_ = 0;
};

} // namespace

Session::Sent Session::write_now() {
    // Replies nearly always fit in the socket buffer: write_all's first
    // step, without a coroutine frame (7 replies a message).
    std::string_view rest(out_);
    if (!smx::smtp::try_write(stream_, rest)) {
        out_.clear();
        return Sent::failed;
    }
    out_.erase(0, out_.size() - rest.size());
    return out_.empty() ? Sent::all : Sent::rest;
}

asio::awaitable<bool> Session::flush() {
    const Sent sent = write_now();
    bool ok = sent != Sent::failed;
    if (sent == Sent::rest) ok = co_await smx::smtp::write_all(stream_, out_, cfg_.command_timeout);
    out_.clear();
    co_return ok;
}

template <class Read>
asio::awaitable<Line> Session::read_after_send(Read read) {
    const Sent sent = send_due();
    // Awaited into locals: GCC 12 miscompiles co_await inside conditions.
    bool flushed = sent != Sent::failed;
    if (sent == Sent::rest) flushed = co_await flush();
    if (!flushed) {
        Line l;
        l.status = ReadStatus::error;
        co_return l;
    }
    co_return co_await read();
}

asio::awaitable<Line> Session::next_line(std::chrono::steady_clock::duration timeout) {
    return read_after_send([this, timeout] { return reader_.read_line(timeout); });
}

asio::awaitable<Line> Session::next_bytes(std::size_t max,
                                          std::chrono::steady_clock::duration timeout) {
    return read_after_send([this, max, timeout] { return reader_.read_bytes(max, timeout); });
}

// GCC 12 warns falsely that this coroutine's frame is freed with a
// mismatched operator delete (GCC PR 109224, fixed in GCC 13; as
// pickup/local_milters.cpp); Boost.Asio allocates and frees the frame itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
asio::awaitable<void> Session::run() {
    client_ = co_await srv_.client_checks().check(*settings_->config, stream_.socket(), ip_, trusted_);
    log_.named(client_.name);
    log_.connected();
    std::optional<ClientLimits::Hit> over;
    if (!client_.close) over = co_await limits_.connect();
    if (client_.close) {
        reject(client_.why, client_.refusal);
        closing_ = true;
    } else if (over) {
        reject(over->why, over->reply);
        closing_ = true;
    } else {
        denied_ = !passes(restrictions_.connect(client_.name));
        if (!denied_ && asks_policy(smx::PolicyStage::connect)) {
            Outcome o = co_await ask_policy(PolicyFacts{.stage = smx::PolicyStage::connect});
            denied_ = !passes(std::move(o));
        }
        if (!denied_) {
            co_await milter_connect();
            reply("220 " + cfg_.hostname + " ESMTP smx");
        }
    }
    while (!closing_) {
        const Line l = co_await next_line(cfg_.command_timeout);
        if (l.status == ReadStatus::timeout) {
            timeout_reply();
            break;
        }
        if (l.status != ReadStatus::ok) {
            if (l.status == ReadStatus::error || in_mail_) log_.lost();
            break;
        }
        std::string_view arg;
        const Verb verb = parse_verb(l.text, arg);
        log_.command(verb);
        if (!l.complete) {
            const auto st = co_await reader_.skip_line(cfg_.command_timeout);
            if (st != ReadStatus::ok) {
                if (st == ReadStatus::timeout) timeout_reply();
                break;
            }
            error(smx::Rejection::bad_command, "500 5.5.2 Error: line too long");
            continue;
        }
        const std::size_t extra = verb == Verb::rcpt   ? smx::dsn::rcpt_line_extra
                                  : verb == Verb::mail ? smx::dsn::mail_line_extra
                                                       : 0;
        if (l.text.size() > cfg_.max_line_length + extra) {
            error(smx::Rejection::bad_command, "500 5.5.2 Error: line too long");
            continue;
        }
        // A client refused at connect gets its refusal to all but QUIT.
        if (!client_.refusal.empty() && !client_.at_rcpt && verb != Verb::quit) {
            reject(client_.why, client_.refusal);
            count_error();
            continue;
        }
        // Refused by client_access at connect (policy.delay_reject = false).
        if (denied_ && verb != Verb::quit) {
            error(smx::Rejection::access_denied, "503 5.7.0 Error: access denied for " + client());
            continue;
        }
        // Refused by a milter at connect, as postfix does.
        if (!milter_refusal_.empty() && verb != Verb::quit) {
            log_.milter_reject(milter_refusal_, details());
            reply(milter_refusal_);
            continue;
        }
        switch (verb) {
        case Verb::ehlo:
        case Verb::helo: {
            const bool esmtp = verb == Verb::ehlo;
            if (!helo(arg, esmtp)) break;
            Outcome o;
            if (asks_policy(smx::PolicyStage::helo))
                o = co_await ask_policy(
                    PolicyFacts{.stage = smx::PolicyStage::helo, .esmtp = esmtp, .helo = arg});
            if (!passes(std::move(o))) break;
            if (milters_) {
                const MilterVerdict v = co_await milters_->helo(arg);
                if (!milter_passes(v)) break;
            }
            helo_taken(arg, esmtp);
            break;
        }
        case Verb::starttls: {
            const bool go_on = co_await starttls(arg);
            if (!go_on) closing_ = true;
            break;
        }
        case Verb::mail: {
            if (!take_place()) co_await wait_for_place();
            const bool over = co_await mail_over_limit();
            if (!over && mail(arg)) {
                Outcome o;
                if (asks_policy(smx::PolicyStage::mail))
                    o = co_await ask_policy(PolicyFacts{
                        .stage = smx::PolicyStage::mail, .sender = sender_, .size = mail_size_});
                if (passes(std::move(o))) mail_taken();
                if (in_mail_) co_await milter_mail();
            }
            if (!in_mail_) reset();  // refused: its place goes on
            break;
        }
        case Verb::rcpt: {
            if (in_mail_ && limits_.asks_at_rcpt()) co_await limits_.ask_rcpt();
            std::optional<RcptArg> r = rcpt(arg);
            if (!r) break;
            Outcome o;
            if (asks_policy(smx::PolicyStage::rcpt))
                o = co_await ask_policy(PolicyFacts{.stage = smx::PolicyStage::rcpt,
                                                    .recipient = r->path.addr,
                                                    .recipient_count = rcpts_.size()});
            if (passes(std::move(o), r->path.addr)) co_await rcpt_taken(std::move(*r));
            break;
        }
        case Verb::data: {
            const bool go_on = co_await data(arg);
            if (!go_on) closing_ = true;
            break;
        }
        case Verb::bdat: {
            const bool go_on = co_await bdat(arg);
            if (!go_on) closing_ = true;
            break;
        }
        case Verb::rset:
            reset();
            junk_reply("250 2.0.0 Ok");
            break;
        case Verb::noop: junk_reply("250 2.0.0 Ok"); break;
        case Verb::vrfy:
            junk_reply("252 2.5.2 Cannot VRFY user, but will accept message and attempt delivery");
            break;
        case Verb::help:
            junk_reply("214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA BDAT RSET NOOP QUIT VRFY HELP" +
                       std::string(settings_->tls && !stream_.tls() ? " STARTTLS" : ""));
            break;
        case Verb::quit:
            reply("221 2.0.0 Bye");
            closing_ = quit_ = true;
            break;
        case Verb::unknown: {
            if (milters_) {
                const MilterVerdict v = co_await milters_->unknown(std::string(l.text));
                if (!milter_passes(v)) {
                    count_error();
                    break;
                }
            }
            error(smx::Rejection::bad_command, "500 5.5.2 Error: command not recognized");
            break;
        }
        }
        // The transaction ended without a message (RSET, HELO, a refusal).
        if (milter_in_message_ && !in_mail_) {
            milter_in_message_ = false;
            co_await milters_->abort();
        }
    }
    if (milters_) {
        if (milter_in_message_) co_await milters_->abort();
        co_await milters_->quit();
    }
    const bool flushed = co_await flush();
    if (flushed && quit_ && stream_.tls()) co_await stream_.close_tls(close_notify_timeout);
    // No shutdown(2): the socket closes as the session ends, right after.
    log_.disconnected();
    limits_.session_ended();
}
#pragma GCC diagnostic pop

std::string Session::details(std::string_view to) const {
    std::string d;
    if (have_sender_) d += "from=<" + sender_ + "> ";
    if (!to.empty()) {
        d += "to=<";
        d += to;
        d += "> ";
    }
    d += esmtp_ ? "proto=ESMTP" : "proto=SMTP";
    if (!helo_.empty()) d += " helo=<" + helo_ + ">";
    return d;
}

bool Session::helo(std::string_view arg, bool esmtp) {
    const bool printable = std::all_of(arg.begin(), arg.end(), [](char c) {
        return c > ' ' && c < 127;  // it goes into the Received: header
    });
    if (arg.empty() || !printable) {
        error(smx::Rejection::bad_syntax,
              esmtp ? "501 5.5.4 Syntax: EHLO hostname" : "501 5.5.4 Syntax: HELO hostname");
        return false;
    }
    return passes(restrictions_.helo(arg));
}

void Session::helo_taken(std::string_view arg, bool esmtp) {
    reset();
    helo_.assign(arg);
    esmtp_ = esmtp;
    if (esmtp)
        out_.append(settings_->ehlo_reply(!stream_.tls()));
    else
        reply("250 " + cfg_.hostname);
}

asio::awaitable<bool> Session::starttls(std::string_view arg) {
    if (!settings_->tls) {
        error(smx::Rejection::bad_command, "502 5.5.1 Error: command not implemented");
        co_return true;
    }
    if (!arg.empty()) {
        error(smx::Rejection::bad_syntax, "501 5.5.4 Syntax: STARTTLS");
        co_return true;
    }
    if (stream_.tls()) {
        error(smx::Rejection::bad_sequence, "503 5.5.1 Error: TLS already active");
        co_return true;
    }
    // Whatever the client sent after STARTTLS, before it saw our 220, is
    // plaintext that an attacker may have injected: it goes unread.
    if (const auto n = reader_.discard())
        spdlog::info("discarding {} bytes of input pipelined after STARTTLS from {}", n,
                     client());
    reply("220 2.0.0 Ready to start TLS");
    const bool flushed = co_await flush();
    if (!flushed) co_return false;
    const std::string err = co_await stream_.start_tls(
        *settings_->tls, asio::ssl::stream_base::server, cfg_.command_timeout);
    if (!err.empty()) {
        spdlog::warn("SSL_accept error from {}: {} (tls_handshake_failures={})", client(), err,
                     srv_.shared().tls_handshake_failed());
        co_return false;
    }
    tls_info_ = smx::tls::describe(stream_.ssl());
    spdlog::info("Anonymous TLS connection established from {}: {}", client(), tls_info_);
    // RFC 3207 4.2: the session starts over; the client must say EHLO again.
    reset();
    helo_.clear();
    esmtp_ = false;
    co_return true;
}

asio::awaitable<bool> Session::mail_over_limit() {
    if (in_mail_ || helo_.empty() || tls_required() || !limits_.asks_at_mail()) co_return false;
    const auto over = co_await limits_.mail();
    if (over) reject(over->why, over->reply);
    co_return over.has_value();
}

bool Session::mail(std::string_view arg) {
    using smx::Rejection;
    if (needs_tls()) return false;
    if (helo_.empty()) {
        error(Rejection::bad_sequence, "503 5.5.1 Error: send HELO/EHLO first");
        return false;
    }
    if (in_mail_) {
        error(Rejection::bad_sequence, "503 5.5.1 Error: nested MAIL command");
        return false;
    }
    const auto p = parse_path(arg, "FROM:");
    if (!p) {
        error(Rejection::bad_syntax, "501 5.5.4 Syntax: MAIL FROM:<address>");
        return false;
    }
    // Named in the log lines of a refusal from here on.
    sender_.assign(p->addr);
    have_sender_ = true;
    std::string_view params = p->params;
    std::uint64_t size = 0;
    bool utf8 = false;
    while (!params.empty()) {
        const auto sp = params.find(' ');
        const std::string_view kv = params.substr(0, sp);
        params.remove_prefix(sp == std::string_view::npos ? params.size() : sp + 1);
        if (kv.empty()) continue;
        if (istarts_with(kv, "SIZE=")) {
            const std::string_view n = kv.substr(5);
            size = 0;
            bool ok = !n.empty() && n.size() <= 19;
            for (char c : n) ok = ok && c >= '0' && c <= '9', size = size * 10 + (c - '0');
            if (!ok) {
                error(Rejection::bad_syntax, "501 5.5.4 Bad SIZE parameter syntax");
                return false;
            }
            if (size > cfg_.max_message_size) {
                reject(Rejection::message_too_big, "552 5.3.4 Message size exceeds fixed limit");
                count_error();
                return false;
            }
        } else if (iequals(kv, "BODY=8BITMIME") || iequals(kv, "BODY=7BIT")) {
        } else if (iequals(kv, "SMTPUTF8")) {
            utf8 = true;
        } else if (smx::dsn::is_mail_param(kv)) {
            // RET and ENVID: checked together below.
        } else {
            error(Rejection::bad_syntax, smx::dsn::unsupported_option(kv));
            return false;
        }
    }
    if (auto e = smx::dsn::check_params(p->params, false); !e.empty()) {
        error(Rejection::bad_syntax, e);
        return false;
    }
    if (smx::smtp::has_8bit(p->addr) && !utf8) {
        error(Rejection::bad_syntax, utf8_required_reply);
        return false;
    }
    if (!valid_address(p->addr, true, utf8)) {
        error(Rejection::bad_syntax, "501 5.1.7 Bad sender address syntax");
        return false;
    }
    // The free space of the content file system is below min_free_space.
    if (!srv_.store().has_room(size)) {
        reject(Rejection::insufficient_storage, "452 4.3.1 Insufficient system storage");
        return false;
    }
    if (!passes(restrictions_.mail(p->addr))) return false;
    // Kept for mail_taken (reset() clears them if the MAIL is refused).
    smtputf8_ = utf8;
    mail_params_.assign(p->params);
    mail_size_ = size;
    policy_instance_.clear();  // a new transaction
    return true;
}

void Session::mail_taken() {
    ta_id_ = smx::new_ta_id();
    if (const auto r = settings_->rewrite.sender(sender_); !r.ok())
        return lookup_refused(r, sender_);
    in_mail_ = true;  // the milters' MAIL and the 250 follow (milter_mail)
}

bool Session::take_place() {
    if (in_mail_ || slot_ || tls_required() || helo_.empty()) return true;
    slot_ = srv_.gate()->try_enter(srv_.transaction_limit(cfg_));
    return static_cast<bool>(slot_);
}

asio::awaitable<void> Session::wait_for_place() {
    // Our replies so far go out before we wait (a pipelining client may
    // be waiting for them).
    const bool flushed = co_await flush();
    if (!flushed) co_return;
    slot_ = co_await srv_.gate()->enter(srv_.transaction_limit(cfg_), cfg_.transaction_wait);
}

std::optional<Session::RcptArg> Session::rcpt(std::string_view arg) {
    using smx::Rejection;
    if (needs_tls()) return std::nullopt;
    if (!in_mail_) {
        error(Rejection::bad_sequence, "503 5.5.1 Error: need MAIL command");
        return std::nullopt;
    }
    const auto p = parse_path(arg, "TO:");
    if (!p || p->addr.empty()) {
        error(Rejection::bad_syntax, "501 5.5.4 Syntax: RCPT TO:<address>");
        return std::nullopt;
    }
    if (smx::smtp::has_8bit(p->addr) && !smtputf8_) {
        error(Rejection::bad_syntax, utf8_required_reply);
        return std::nullopt;
    }
    if (!valid_address(p->addr, false, smtputf8_)) {
        error(Rejection::bad_syntax, "501 5.1.3 Bad recipient address syntax");
        return std::nullopt;
    }
    // NOTIFY and ORCPT (RFC 3461) only; kept as received for QMGR and SMTPC.
    if (auto e = smx::dsn::check_params(p->params, true); !e.empty()) {
        error(Rejection::bad_syntax, e);
        return std::nullopt;
    }
    if (const auto over = limits_.take_rcpt()) {
        reject(over->why, over->reply, p->addr);
        return std::nullopt;
    }
    // A recipient named twice gets one copy (postfix's duplicate filter):
    // the same local part, the domain in any case.
    // A set, not a scan of rcpts_: a client may send RCPTs without end.
    std::string key = smx::address_key(p->addr);
    if (rcpt_keys_.contains(key)) {
        spdlog::info("{}: duplicate recipient <{}> stored once", ta_id_, p->addr);
        reply("250 2.1.5 Ok");
        return std::nullopt;
    }
    if (rcpts_.size() >= cfg_.max_recipients) {
        reject(Rejection::too_many_recipients, "452 4.5.3 Error: too many recipients", p->addr);
        return std::nullopt;
    }
    if (client_.at_rcpt) {
        reject(client_.why, client_.refusal, p->addr);
        return std::nullopt;
    }
    if (!passes(restrictions_.rcpt(helo_, sender_, p->addr), p->addr)) return std::nullopt;
    return RcptArg{*p, std::move(key)};
}

asio::awaitable<void> Session::rcpt_taken(RcptArg r) {
    // Copies: the milters are asked before the 250.
    const std::string addr(r.path.addr), params(r.path.params);
    // Canonical and virtual alias rewriting (libsm/rewrite.hpp): what is stored.
    std::vector<smx::msg::Recipient> to;
    if (const auto rw = settings_->rewrite.recipient(addr, params, to); !rw.ok()) {
        lookup_refused(rw, addr);
        co_return;
    }
    if (milters_) {
        const bool taken = co_await milter_rcpt(addr, params);
        if (!taken) co_return;
    }
    if (!add_recipients(std::move(to), std::move(r.key))) {
        reject(smx::Rejection::too_many_recipients,
               "452 4.5.3 Error: too many recipients (envelope too large)", addr);
        co_return;
    }
    log_.recipient_taken(ta_id_);
    reply("250 2.1.5 Ok");
}

bool Session::add_recipients(std::vector<smx::msg::Recipient> to, std::string key) {
    // An alias may name a recipient the envelope has: one copy.
    std::erase_if(to, [&](const auto& r) { return rcpt_keys_.contains(smx::address_key(r.addr)); });
    const std::size_t grows = smx::msg::recipients_size(to);
    if (smx::msg::envelope_size(sender_, mail_params_, helo_) + envelope_size_ + grows >
        smx::msg::max_envelope)
        return false;
    envelope_size_ += grows;
    rcpt_keys_.insert(std::move(key));
    for (auto& r : to) {
        rcpt_keys_.insert(smx::address_key(r.addr));
        rcpts_.push_back(std::move(r));
    }
    return true;
}

void Session::lookup_refused(const smx::RewriteResult& r, std::string_view addr) {
    if (!r.warning.empty()) spdlog::warn("{}: {}", ta_id_, r.warning);
    reject(smx::Rejection::policy_unavailable, r.reply, addr);
}

std::string Session::received_header() const {
    // Appended piece by piece into one buffer: once per message.
    std::string h;
    h.reserve(256 + helo_.size() + tls_info_.size() + cfg_.hostname.size() +
              (rcpts_.size() == 1 ? rcpts_.front().addr.size() : 0));
    for (std::string_view part : {std::string_view("Received: from "), std::string_view(helo_),
                                  std::string_view(" ("), std::string_view(client_.name),
                                  std::string_view(" ["), std::string_view(ip_),
                                  std::string_view("])\r\n\t")})
        h += part;
    if (!tls_info_.empty()) {
        h += "(using ";
        h += tls_info_;
        h += ")\r\n\t";
    }
    for (std::string_view part :
         {std::string_view("by "), std::string_view(cfg_.hostname), std::string_view(" (smx) with "),
          std::string_view(esmtp_ ? "ESMTP" : "SMTP"), std::string_view(tls_info_.empty() ? "" : "S"),
          std::string_view(" id "), std::string_view(ta_id_)})
        h += part;
    if (rcpts_.size() == 1) {
        h += "\r\n\tfor <";
        h += rcpts_.front().addr;
        h += ">; ";
    } else {
        h += ";\r\n\t";
    }
    h += smx::rfc5322_date(smx::now_us());
    h += "\r\n";
    return h;
}

void Session::start_content(ContentWriter& w) const {
    for (const auto& h : restrictions_.prepend()) {
        w.append(h);
        w.append("\r\n");
    }
    w.append(received_header());
}

// Returns false when the connection must close (timeout, lost client).
asio::awaitable<bool> Session::data(std::string_view arg) {
    using smx::Rejection;
    if (needs_tls()) co_return true;
    if (!in_mail_) {
        error(Rejection::bad_sequence, "503 5.5.1 Error: need MAIL command");
        co_return true;
    }
    if (chunking_) {  // RFC 3030 2: no DATA in a BDAT transaction
        error(Rejection::bad_sequence, "503 5.5.1 Error: DATA after BDAT");
        co_return true;
    }
    if (rcpts_.empty()) {
        error(Rejection::bad_sequence, "554 5.5.1 Error: no valid recipients");
        co_return true;
    }
    if (!arg.empty()) {
        error(Rejection::bad_syntax, "501 5.5.4 Syntax: DATA");
        co_return true;
    }
    if (!srv_.qmgr().connected()) {
        reject(Rejection::queue_unavailable, "451 4.3.0 Error: queue manager unavailable",
               rcpts_.front().addr);
        reset();
        co_return true;
    }
    if (asks_policy(smx::PolicyStage::data)) {
        Outcome o = co_await ask_policy(
            PolicyFacts{.stage = smx::PolicyStage::data, .recipient_count = rcpts_.size()});
        if (!passes(std::move(o), rcpts_.front().addr)) co_return true;
    }
    if (milters_) {
        const MilterVerdict v = co_await milters_->data();
        if (!milter_passes(v, rcpts_.front().addr)) co_return true;
    }
    reply("354 End data with <CR><LF>.<CR><LF>");
    ContentWriter w(srv_.store(), ta_id_, srv_.segment());
    start_content(w);
    const std::uint64_t header_size = w.size();
    reader_.set_max_line(data_chunk);
    ContentChecks checks = content_checks(w);
    const DataOutcome d = co_await read_content(checks);
    reader_.set_max_line(cfg_.max_line_length + smx::dsn::rcpt_line_extra);
    if (d.status != ReadStatus::ok) {
        if (d.status == ReadStatus::timeout) timeout_reply(w.size() - header_size);
        else log_.lost(w.size() - header_size);
        reset();
        co_return false;
    }
    log_.end_of_message();
    // Refused: what was written of it goes with w.
    if (content_accepted(d.content) && checks_accepted(checks.verdict())) {
        const bool go_on = co_await milter_message(w);
        if (go_on) co_await queue(w, d.content.message_id, checks.verdict());
    }
    reset();
    co_return true;
}

asio::awaitable<DataOutcome> Session::read_content(ContentChecks& checks) {
    DataOutcome d;
    DataClock clock(cfg_);  // one bound for the whole DATA phase
    ContentReader reader(!cfg_.reject_bare_lf, cfg_.max_message_size);
    for (;;) {
        const Line l = co_await next_line(clock.left());
        if (l.status != ReadStatus::ok) {
            d.status = l.status;
            co_return d;
        }
        clock.received(l.text.size() + (l.complete ? 2 : 0));
        if (reader.feed(l, [&checks](std::string_view bytes) { checks.feed(bytes); })) {
            checks.finish();
            d.content = reader.result();
            co_return d;
        }
    }
}

// RFC 3030: each chunk's octets are read whether it is taken or refused, so
// that the next command is found where it begins.
asio::awaitable<bool> Session::bdat(std::string_view arg) {
    const auto b = parse_bdat(arg);
    if (!b) {
        // The chunk's length is unknown: what follows is read as commands.
        error(smx::Rejection::bad_syntax, "501 5.5.4 Syntax: BDAT count [LAST]");
        co_return true;
    }
    std::optional<Refusal> refused = bdat_refusal();
    std::string milter_reply;  // the milters' refusal of the first chunk (their DATA)
    if (!refused && !chunking_ && milters_) {
        const MilterVerdict v = co_await milters_->data();
        if (v.refused()) {
            milter_reply = v.reply;
            refused = Refusal{smx::Rejection::milter, milter_reply};
        } else {
            milter_passes(v);
        }
    }
    if (!refused && !chunking_) {
        chunking_ = std::make_unique<Chunking>(srv_.store(), ta_id_, srv_.segment(), !cfg_.reject_bare_lf,
                                               cfg_.max_message_size);
        start_content(chunking_->w);
        chunking_->header_size = chunking_->w.size();
        chunking_->checks.emplace(content_checks(chunking_->w));
    }
    DataClock clock(cfg_);  // one bound per chunk
    for (std::uint64_t left = b->size; left > 0;) {
        const Line l = co_await next_bytes(std::min<std::uint64_t>(left, data_chunk),
                                           clock.left());
        if (l.status != ReadStatus::ok) {
            if (l.status == ReadStatus::timeout) timeout_reply(b->size - left);
            else log_.lost(b->size - left);
            reset();
            co_return false;
        }
        left -= l.text.size();
        clock.received(l.text.size());
        if (!refused)
            chunking_->content.feed(l.text, [this](std::string_view x) { chunking_->checks->feed(x); });
    }
    if (refused) {
        if (refused->why == smx::Rejection::queue_unavailable) {
            reject(refused->why, refused->reply, rcpts_.front().addr);
            reset();
        } else if (refused->why == smx::Rejection::milter) {
            log_.milter_reject(refused->reply, details(rcpts_.front().addr));
            reply(refused->reply);
        } else if (refused->why == smx::Rejection::tls_required) {
            reject(refused->why, refused->reply);
            count_error();
        } else {
            error(refused->why, refused->reply);
        }
        co_return true;
    }
    if (b->last) {
        chunking_->content.finish([this](std::string_view x) { chunking_->checks->feed(x); });
        chunking_->checks->finish();
    }
    const Content& c = chunking_->content.result();
    if (!content_accepted(c)) {
        reset();
        co_return true;
    }
    if (!b->last) {
        reply("250 2.0.0 Ok: " + std::to_string(b->size) + " octets received");
        co_return true;
    }
    // As postfix: a check's verdict is the end of data's answer.
    if (!checks_accepted(chunking_->checks->verdict())) {
        reset();
        co_return true;
    }
    const bool go_on = co_await milter_message(chunking_->w);
    if (go_on) co_await queue(chunking_->w, c.message_id, chunking_->checks->verdict());
    reset();
    co_return true;
}

std::optional<Session::Refusal> Session::bdat_refusal() {
    using smx::Rejection;
    if (tls_required()) return Refusal{Rejection::tls_required, tls_required_reply};
    if (!in_mail_) return Refusal{Rejection::bad_sequence, "503 5.5.1 Error: need MAIL command"};
    if (rcpts_.empty())
        return Refusal{Rejection::bad_sequence, "554 5.5.1 Error: no valid recipients"};
    if (!chunking_ && !srv_.qmgr().connected())
        return Refusal{Rejection::queue_unavailable, "451 4.3.0 Error: queue manager unavailable"};
    return std::nullopt;
}

bool Session::content_accepted(const Content& c) {
    using smx::Rejection;
    const std::string& to = rcpts_.front().addr;
    if (c.too_big) {
        reject(Rejection::message_too_big, "552 5.3.4 Error: message file too big", to);
    } else if (c.bare_eol) {
        reject(Rejection::bare_line_end, "550 5.6.11 Error: bare LF/CR not allowed", to);
        count_error();
    } else if (c.hops > cfg_.max_hops) {
        reject(Rejection::too_many_hops, "554 5.4.6 Error: too many hops", to);
    } else {
        return true;
    }
    return false;
}

bool Session::checks_accepted(const ContentVerdict& v) {
    using Kind = ContentVerdict::Kind;
    if (v.kind == Kind::reject) {
        log_.check_refused(v.why, v.reply);  // its reject: line is logged
    } else if (v.kind == Kind::tempfail) {
        log_.reject(v.why, v.reply, details(rcpts_.front().addr));
    } else {
        return true;
    }
    reply(v.reply);
    return false;
}

asio::awaitable<void> Session::queue(ContentWriter& w, const std::string& message_id,
                                     const ContentVerdict& v) {
    if (asks_policy(smx::PolicyStage::end_of_data)) {
        const bool passed = co_await end_of_data_policy(w);
        if (!passed) co_return;
    }
    Shared::CommitGuard guard(srv_.shared());
    reply(co_await commit(w, message_id, v));
    // The reply is out before the guard releases a shutdown waiting for it.
    if (write_now() == Sent::rest) co_await flush();
}

asio::awaitable<std::string> Session::commit(ContentWriter& w, const std::string& message_id,
                                             const ContentVerdict& v) {
    using smx::Rejection;
    // Arrival is the end of DATA: QMGR's ack latency histogram measures
    // from here, so it covers the content file's write (and fsync) too.
    const std::uint64_t arrival_us = smx::now_us();
    // The envelope moves into the commit below; a refusal still names it.
    const std::string detail = details(rcpts_.front().addr);
    // An access DISCARD: the client is told the message is queued, as
    // postfix tells it; nothing is (the content goes with w).
    if (restrictions_.discard() || v.kind == ContentVerdict::Kind::discard) {
        spdlog::info("{}: discarded: from=<{}>, size={}, nrcpt={}", ta_id_, sender_, w.size(), rcpts_.size());
        co_return "250 2.0.0 Ok: queued as " + ta_id_;
    }
    if (const int err = co_await w.commit(); err != 0) {
        // Below min_free_space is no error of ours; a failed write is.
        std::string r = "452 4.3.1 Insufficient system storage";
        if (!w.short_of_space()) {
            spdlog::error("{}: cannot write queue file: {}", ta_id_, std::strerror(err));
            r = err == ENOSPC || err == EDQUOT ? "452 4.3.1 Error: insufficient system storage"
                                               : "451 4.3.0 Error: queue file write error";
        }
        log_.reject(r.starts_with("452") ? Rejection::insufficient_storage
                                         : Rejection::queue_unavailable,
                    r, detail);
        co_return r;
    }
    smx::log_as(smx::LogAs::cleanup)
        .info("{}: message-id={}", ta_id_, message_id.empty() ? "<>" : message_id);
    smx::msg::TaCommit ta;
    ta.ta_id = ta_id_;
    ta.client_addr = ip_;
    ta.client_name = client_.name;
    ta.helo = helo_;
    // The transaction ends with this commit (reset() follows): its
    // envelope moves, not copies.
    ta.sender = std::move(sender_);
    ta.params = std::move(mail_params_);
    ta.rcpts = std::move(rcpts_);
    ta.content_id = w.content_id();
    ta.size = w.size();
    ta.arrival_us = arrival_us;
    ta.hold = restrictions_.hold().empty() ? v.hold : restrictions_.hold();
    if (ta.hold.empty() && !milter_hold_.empty()) {
        log_.note("milter-hold", milter_hold_, detail);
        ta.hold = "milter: " + milter_hold_;
    }
    const auto ack = co_await srv_.qmgr().commit(ta);
    // Without an answer QMGR may still have logged the transaction, so the
    // file stays; a client retry at worst makes a duplicate.
    if (!ack) {
        const std::string r = "451 4.3.0 Error: queue manager not responding";
        log_.reject(Rejection::queue_unavailable, r, detail);
        co_return r;
    }
    using smx::msg::AckStatus;
    if (ack->status == AckStatus::ok) {
        spdlog::info("{}: from=<{}>, size={}, nrcpt={} (queued)", ta_id_, ta.sender, w.size(),
                     ta.rcpts.size());
        junk_ = 0;
        co_return "250 2.0.0 Ok: queued as " + ta_id_;
    }
    // Refused: QMGR will never look at the file.
    w.remove_committed();
    const bool temp = ack->status == AckStatus::tempfail;
    // QMGR says 4.3.1 when its queue or disk is full: 452, as for ENOSPC here.
    std::string r = !temp ? "554 " : ack->text.starts_with("4.3.1") ? "452 " : "451 ";
    if (smx::smtp::split_enhanced(ack->text).first.empty()) r += temp ? "4.3.0 " : "5.3.0 ";
    r += ack->text.empty() ? "Error: queue manager refused the message" : ack->text;
    log_.reject(r.starts_with("452") ? Rejection::insufficient_storage : Rejection::queue_refused,
                r, detail);
    co_return r;
}

asio::awaitable<void> run_session(Server& srv, asio::ip::tcp::socket sock, std::string ip,
                                  bool trusted) {
    Session s(srv, std::move(sock), std::move(ip), trusted);
    co_await s.run();
}

} // namespace smx::smtps
