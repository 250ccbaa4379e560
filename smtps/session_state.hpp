// One SMTP session's state and steps: the Session that run_session
// (smtps/session.hpp) runs. Its member functions live in session.cpp (the
// SMTP dialogue), session_milter.cpp (the milters' steps) and
// session_policy.cpp (the policy services' steps).
#pragma once

#include "libsm/dsn_params.hpp"
#include "libsm/milters.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/smtp_stream.hpp"
#include "smtps/client_check.hpp"
#include "smtps/client_limits.hpp"
#include "smtps/content.hpp"
#include "smtps/content_checks.hpp"
#include "smtps/content_writer.hpp"
#include "smtps/policy_client.hpp"
#include "smtps/policy_request.hpp"
#include "smtps/restrictions.hpp"
#include "smtps/server.hpp"
#include "smtps/session_log.hpp"
#include "smtps/transaction_gate.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

namespace smx::smtps {

using smx::milter::MilterVerdict;
using smx::milter::Milters;
using smx::smtp::Line;
using smx::smtp::ReadStatus;

// What reading the message content found.
struct DataOutcome {
    ReadStatus status = ReadStatus::ok;
    Content content;
};

// A BDAT transaction under way: the content so far, across commands.
struct Chunking {
    Chunking(ContentStore& store, const std::string& ta_id, std::shared_ptr<SegmentWriter> segment,
             bool normalize, std::uint64_t max)
        : w(store, ta_id, std::move(segment)), content(normalize, max) {}
    ContentWriter w;
    BdatContent content;
    std::uint64_t header_size = 0;
    std::optional<ContentChecks> checks;  // between content and w
};

class Session {
public:
    Session(Server& srv, asio::ip::tcp::socket sock, std::string ip, bool trusted)
        : srv_(srv), settings_(srv.settings()), cfg_(settings_->server()),
          stream_(std::move(sock)),
          reader_(stream_, cfg_.max_line_length + smx::dsn::rcpt_line_extra),
          ip_(std::move(ip)), log_(ip_, srv.rejections()), trusted_(trusted),
          limits_(srv.qmgr(), *settings_->config, ip_, trusted_, log_.client()),
          restrictions_(*settings_->config, settings_->tables, ip_, trusted, log_.client(),
                        &settings_->rewrite),
          policy_client_(srv.policy_client()), milter_failures_(srv.milter_failures()) {}

    asio::awaitable<void> run();

private:
    // Pending replies are written out once they pass this, even while more
    // pipelined input waits: a client that sends without reading then meets
    // the write deadline instead of growing our buffer.
    static constexpr std::size_t max_pending_output = 4096;
    // Replies are collected and written in one go when the client has sent
    // nothing more (pipelining), when they pass max_pending_output, or
    // before we wait on something else.
    void reply(std::string_view r) {
        out_.append(r);
        out_.append("\r\n");
    }
    // A command refused as wrong (unknown, bad syntax, out of order):
    // logged, and it counts towards max_errors.
    void error(smx::Rejection why, std::string_view r) {
        log_.error(why, r, details());
        reply(r);
        count_error();
    }
    // A recipient, message or limit refused (to: the recipient refused).
    void reject(smx::Rejection why, std::string_view r, std::string_view to = {}) {
        log_.reject(why, r, details(to));
        reply(r);
    }
    // A restriction stage's verdict (smtps/restrictions.hpp): its notes
    // logged; false when it refused (logged, counted and answered).
    bool passes(Outcome o, std::string_view to = {}) {
        for (const auto& n : o.notes) log_.note(n.kind, n.text, details(to));
        if (!o.refusal) return true;
        reject(o.refusal->why, o.refusal->reply, to);
        count_error();
        return false;
    }
    void count_error() {
        if (++errors_ < cfg_.max_errors) return;
        log_.too_many_errors();
        reply("421 4.7.0 " + cfg_.hostname + " Error: too many errors");
        closing_ = true;
    }
    // A reply to NOOP, VRFY, RSET or HELP: past max_junk_commands in this
    // session, each counts as an error.
    void junk_reply(std::string_view r) {
        reply(r);
        if (++junk_ > cfg_.max_junk_commands) count_error();
    }
    // What a refusal's log line tells of the session, as postfix's do:
    // "from=<s> to=<r> proto=ESMTP helo=<h>".
    std::string details(std::string_view to = {}) const;
    // Writes the pending replies; false when writing failed.
    asio::awaitable<bool> flush();
    // What a write of the pending replies did, as far as the socket took
    // them at once; what is left stays in out_ (nearly never: then flush()).
    enum class Sent { all, rest, failed };
    Sent write_now();
    // write_now() when no input waits or too many replies are pending.
    Sent send_due() {
        if (out_.empty() || (reader_.buffered() != 0 && out_.size() < max_pending_output))
            return Sent::all;
        return write_now();
    }
    // The next line, or raw octets of a BDAT chunk, after send_due().
    asio::awaitable<Line> next_line(std::chrono::steady_clock::duration timeout);
    asio::awaitable<Line> next_bytes(std::size_t max,
                                     std::chrono::steady_clock::duration timeout);
    // read() (one of reader_'s) after send_due() and, if need be, flush().
    template <class Read>
    asio::awaitable<Line> read_after_send(Read read);

    // HELO/EHLO's checks: true when the name may be taken (helo_taken).
    bool helo(std::string_view arg, bool esmtp);
    void helo_taken(std::string_view arg, bool esmtp);
    // Policy services (session_policy.cpp): their verdict
    // (policy.policy_services) at f.stage, which the caller checks
    // policy.policy_service_stages for; f gives what the stage knows, the
    // session the rest.
    bool asks_policy(smx::PolicyStage stage) const {
        return settings_->config->policy.asks_policy(stage);
    }
    asio::awaitable<Outcome> ask_policy(PolicyFacts f);
    // Their verdict at the end of data, w the content: false when they
    // refused it (logged and answered).
    asio::awaitable<bool> end_of_data_policy(const ContentWriter& w);
    // STARTTLS: false when the connection must close (failed handshake).
    asio::awaitable<bool> starttls(std::string_view arg);
    // server.tls_security_level = encrypt and no TLS yet: refuses the command.
    bool needs_tls() {
        if (!tls_required()) return false;
        reject(smx::Rejection::tls_required, tls_required_reply);
        count_error();
        return true;
    }
    bool tls_required() const {
        return cfg_.tls_security_level == smx::TlsLevel::encrypt && !stream_.tls();
    }
    static constexpr std::string_view tls_required_reply =
        "530 5.7.0 Must issue a STARTTLS command first";
    static constexpr std::string_view utf8_required_reply =
        "553 5.6.7 Must declare SMTPUTF8 to send unicode address";
    // A place among the loop's server.max_transactions for the MAIL to
    // come (smtps/transaction_gate.hpp), unless that MAIL will be refused
    // anyway: false when none is free now and wait_for_place() must wait
    // for one (a coroutine only then).
    bool take_place();
    asio::awaitable<void> wait_for_place();
    // An in-sequence MAIL past the client's message rate is refused before
    // its syntax is read, as postfix's; true when refused.
    asio::awaitable<bool> mail_over_limit();
    // MAIL's checks: true when the transaction may start (mail_taken).
    bool mail(std::string_view arg);
    void mail_taken();
    // RCPT's checks, smx's restrictions included: the recipient (views into
    // the command line) when they permit it, for rcpt_taken.
    struct RcptArg {
        PathArg path;
        std::string key;  // smx::address_key of the address
    };
    std::optional<RcptArg> rcpt(std::string_view arg);
    // The recipient rewritten, asked of the milters and taken (250).
    asio::awaitable<void> rcpt_taken(RcptArg r);

    // Milters (session_milter.cpp; libsm/milters.hpp, docs/milter.md): the
    // session's chain, made at connect when its listener has any.
    asio::awaitable<void> milter_connect();
    // MAIL passed every other check: the milters', then 250.
    asio::awaitable<void> milter_mail();
    // RCPT's milter step: false when they refused it (logged and answered).
    asio::awaitable<bool> milter_rcpt(const std::string& addr, const std::string& params);
    // The content as stored to the milters, and their verdict at its end
    // applied: false when the message is not to be queued (refused or
    // discarded, and answered).
    asio::awaitable<bool> milter_message(ContentWriter& w);
    // A stage's verdict noted (hold, discard); false when it refused (then
    // logged and answered).
    bool milter_passes(const MilterVerdict& v, std::string_view to = {});
    // The edits written into w and the envelope; an error reply, or empty.
    std::string apply_milter_edits(ContentWriter& w, const std::vector<std::string>& fields,
                                   bool blank_line, const std::vector<smx::milter::Reply>& edits);
    // A macro's value for the milters (postfix's names), nullopt when unset.
    std::optional<std::string> macro(std::string_view name);

    // The recipients an RCPT (key: smx::address_key of it) stands for after
    // rewriting, but those the envelope has; false (nothing added) when the
    // envelope would be too large.
    bool add_recipients(std::vector<smx::msg::Recipient> to, std::string key);
    // A sender or recipient rewriting refused (a table failed, an alias loop).
    void lookup_refused(const smx::RewriteResult& r, std::string_view addr);
    asio::awaitable<bool> data(std::string_view arg);
    asio::awaitable<DataOutcome> read_content(ContentChecks& checks);
    // header_checks and body_checks between the content and w.
    ContentChecks content_checks(ContentWriter& w) {
        const auto& p = settings_->config->policy;
        return ContentChecks(
            settings_->tables.header_checks, settings_->tables.body_checks, p.header_size_limit,
            p.body_checks_size_limit, [&w](std::string_view bytes) { w.append(bytes); },
            [this](const CheckEvent& e) { log_.check(e, details(rcpts_.front().addr)); });
    }
    // A check's REJECT or failed lookup answered: false (content_accepted's
    // sibling, for the content after the checks).
    bool checks_accepted(const ContentVerdict& v);
    // BDAT: false when the connection must close (timeout, lost client).
    asio::awaitable<bool> bdat(std::string_view arg);
    // Why a BDAT chunk is refused; nullopt when it is taken.
    struct Refusal {
        smx::Rejection why;
        std::string_view reply;
    };
    std::optional<Refusal> bdat_refusal();
    // The checks of the content (DATA's, or BDAT's so far): false when it
    // is refused (and the refusal logged and replied).
    bool content_accepted(const Content& c);
    // message_id: the Message-ID header's value, or empty; v: the checks'
    // DISCARD or HOLD.
    asio::awaitable<void> queue(ContentWriter& w, const std::string& message_id, const ContentVerdict& v);
    asio::awaitable<std::string> commit(ContentWriter& w, const std::string& message_id,
                                        const ContentVerdict& v);
    void reset() {
        in_mail_ = false;
        smtputf8_ = false;
        sender_.clear();
        have_sender_ = false;
        mail_params_.clear();
        rcpts_.clear();
        rcpt_keys_.clear();
        slot_.reset();
        envelope_size_ = 0;
        mail_size_ = 0;
        ta_id_.clear();
        chunking_.reset();
        milter_discard_ = false;
        milter_hold_.clear();
        log_.transaction_ended();
        limits_.transaction_ended();
    }
    const std::string& client() const { return log_.client(); }
    std::string received_header() const;
    // What a message's content begins with: the headers PREPEND asked for,
    // then our Received: header.
    void start_content(ContentWriter& w) const;
    // bytes: of the content read so far, when it timed out in DATA or BDAT.
    void timeout_reply(std::optional<std::uint64_t> bytes = std::nullopt) {
        log_.timeout(bytes);
        reply("421 4.4.2 " + cfg_.hostname + " Error: timeout exceeded");
    }

    Server& srv_;
    // The config this session started with: a reload does not change it.
    const std::shared_ptr<const Settings> settings_;
    const smx::ServerConfig& cfg_;
    smx::smtp::Stream stream_;
    smx::smtp::LineReader<smx::smtp::Stream> reader_;
    std::string ip_;
    SessionLog log_;
    bool trusted_;
    ClientVerdict client_;  // its name, and a refusal of it at connect or RCPT
    ClientLimits limits_;  // server.max_connections_per_client and [anvil]
    Restrictions restrictions_;
    const std::shared_ptr<PolicyClient> policy_client_;
    std::string policy_instance_;  // the transaction's "instance" attribute; empty: none yet
    std::uint64_t mail_size_ = 0;  // MAIL's SIZE=
    // Refused at connect (policy.delay_reject = false): only QUIT is taken.
    bool denied_ = false;
    std::string out_;
    std::string helo_;
    std::string tls_info_;  // "TLSv1.3 with cipher ..." once TLS is on
    bool esmtp_ = false;
    bool in_mail_ = false;
    bool smtputf8_ = false;  // MAIL ... SMTPUTF8: UTF-8 addresses allowed
    std::string ta_id_;
    std::string sender_;
    bool have_sender_ = false;  // sender_ is a MAIL's (taken or being refused)
    std::string mail_params_;
    std::vector<smx::msg::Recipient> rcpts_;
    std::unordered_set<std::string> rcpt_keys_;  // local part + lower-case domain, of rcpts_
    std::size_t envelope_size_ = 0;  // what rcpts_ add to the TA_COMMIT
    std::unique_ptr<Chunking> chunking_;  // after the first BDAT of a transaction
    TransactionGate::Slot slot_;          // from MAIL to the end of the transaction
    unsigned errors_ = 0;
    unsigned junk_ = 0;  // NOOP, VRFY, RSET and HELP since the session or its last queued message
    bool closing_ = false;
    bool quit_ = false;  // the client said QUIT (a TLS session then ends cleanly)
    // Where milters_ counts its failures: the loop's, which it reports.
    const std::shared_ptr<smx::msg::MilterFailureCounts> milter_failures_;
    std::unique_ptr<Milters> milters_;
    std::string milter_refusal_;      // at connect: every command but QUIT gets it
    bool milter_in_message_ = false;  // the milters saw MAIL and no end of message or abort yet
    bool milter_discard_ = false;     // DISCARD in this transaction
    std::string milter_hold_;         // QUARANTINE in this transaction: why
    std::string milter_rcpt_;         // {rcpt_addr} while a RCPT is asked
};

} // namespace smx::smtps
