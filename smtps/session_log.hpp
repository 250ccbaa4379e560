// What an SMTP session logs, in the shape postfix's smtpd gives the same
// events (docs/operation.md, Logs), so that pflogsumm and fail2ban's postfix
// filter read them:
//   connect from unknown[192.0.2.1]                  (or name[192.0.2.1])
//   ID: client=unknown[192.0.2.1]                    (the first recipient taken)
//   NOQUEUE: reject: RCPT from unknown[192.0.2.1]: 554 5.7.1 <u@x>: Relay access
//       denied; from=<s> to=<u@x> proto=ESMTP helo=<h>
//   NOQUEUE: error: MAIL from unknown[192.0.2.1]: 501 5.5.4 Syntax: ...; proto=ESMTP helo=<h>
//   ID: hold: RCPT from unknown[192.0.2.1]: <s@x>: Sender address triggers
//       HOLD action; from=<s@x> to=<u@y> proto=ESMTP helo=<h>   (and discard:)
//   too many errors after UNKNOWN from unknown[192.0.2.1]
//   timeout after DATA (1024 bytes) from unknown[192.0.2.1]
//   disconnect from unknown[192.0.2.1] ehlo=1 mail=1 rcpt=0/1 quit=1 commands=3/4
// "reject:" is a refusal of a recipient, message or connection by policy
// or a limit (pflogsumm counts them); "error:" a command refused as wrong
// (unknown, syntax, out of order). Every refusal is also counted by reason
// and reply class for the metrics (libsm/rejections.hpp).
#pragma once

#include "libsm/rejections.hpp"
#include "smtps/command.hpp"
#include "smtps/content_checks.hpp"

#include <array>
#include <memory>
#include <string>
#include <string_view>

namespace smx::smtps {

class SessionLog {
public:
    SessionLog(std::string ip, std::shared_ptr<smx::RejectionCounts> counts);

    // "name[addr]", or "unknown[addr]" as postfix names a client without a
    // confirmed name.
    const std::string& client() const { return client_; }
    // The client's name is known (before connected()).
    void named(const std::string& name) { client_ = name + "[" + ip_ + "]"; }

    void connected() const;
    // A command begins (counted for the disconnect line; its name is where
    // what follows happened).
    void command(Verb v);
    // The content has ended: refusals now are of the message as a whole.
    void end_of_message() { where_ = "END-OF-MESSAGE"; }
    // A recipient was taken: the first one logs "ID: client=", and lines
    // carry the queue id from then on instead of NOQUEUE.
    void recipient_taken(const std::string& ta_id);
    // The transaction is over (queued, refused or reset).
    void transaction_ended() { queue_id_ = "NOQUEUE"; }
    const std::string& queue_id() const { return queue_id_; }

    // A refusal: logged and counted, and the command counted as failed.
    // details: "from=<...> to=<...> proto=ESMTP helo=<...>", what is known.
    void reject(smx::Rejection why, std::string_view reply, std::string_view details);
    // A milter's refusal (or its default action): "milter-reject: ...".
    void milter_reject(std::string_view reply, std::string_view details);
    void error(smx::Rejection why, std::string_view reply, std::string_view details);
    // An access action that takes the message but changes its fate: kind
    // "hold" or "discard" (not a refusal: not counted).
    void note(std::string_view kind, std::string_view text, std::string_view details) const;
    // A header_checks or body_checks event, as postfix's cleanup logs it
    // (pflogsumm counts its reject:, warning:, hold: and discard: lines):
    //   ID: reject: header Subject: x from name[ip]; from=<s> to=<r>
    //       proto=ESMTP helo=<h>: 5.7.1 text
    // "unsupported" and "failed" events are warnings.
    void check(const CheckEvent& e, std::string_view details) const;
    // The message refused by a check whose reject: line check() logged:
    // counted, and the command counted as failed, without a second line.
    void check_refused(smx::Rejection why, std::string_view reply);
    // The 421 that ends a session: logged as postfix does, and counted.
    void too_many_errors();
    // Timeout or lost connection; bytes: of the content read so far.
    void timeout(std::optional<std::uint64_t> bytes = std::nullopt);
    void lost(std::optional<std::uint64_t> bytes = std::nullopt) const;
    void disconnected() const;

private:
    void refused(std::string_view kind, smx::Rejection why, std::string_view reply,
                 std::string_view details);
    std::string after(std::optional<std::uint64_t> bytes) const;

    const std::string ip_;
    std::string client_;
    const std::shared_ptr<smx::RejectionCounts> counts_;
    std::string queue_id_ = "NOQUEUE";
    std::string_view where_ = "CONNECT";
    // Per verb: commands given, and refused.
    std::array<unsigned, verb_count> given_{}, failed_{};
    Verb current_ = Verb::unknown;
    bool current_failed_ = false;
};

} // namespace smx::smtps
