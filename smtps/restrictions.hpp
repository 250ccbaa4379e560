// SMTPS's restriction stages, in postfix's order (docs/policy.md): connect
// (policy.client_access), HELO (helo_access), MAIL (sender_access), RCPT
// (recipient_access, then the relay decision, then relay_recipient_maps).
// Each stage is one restriction list, as postfix's smtpd_*_restrictions:
// an access(5) action decides for that list only. With policy.delay_reject
// the client, HELO and sender lists are evaluated at each RCPT instead of at
// their own command, so that their refusals are answered (and logged) there.
//
// One per session; it keeps what the stages leave for later ones
// (DEFER_IF_PERMIT) and for the message (HOLD, DISCARD). Lookups happen
// here, on the session's thread: tables are in memory or Berkeley DB files.
#pragma once

#include "libsm/config.hpp"
#include "libsm/policy_tables.hpp"
#include "libsm/rewrite.hpp"
#include "libsm/rejections.hpp"
#include "smtps/policy.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::smtps {

struct Refusal {
    smx::Rejection why;
    std::string reply;  // "554 5.7.1 <u@x>: Recipient address rejected: Access denied"
};

// What a stage found: lines to log ("hold" or "discard" and their text, as
// postfix's smtpd logs them), and a refusal to answer the command with.
struct Outcome {
    struct Note {
        std::string_view kind;  // "hold", "discard", "warn", "info"
        std::string text;       // "<u@x>: Sender address triggers HOLD action"
    };
    std::vector<Note> notes;
    std::optional<Refusal> refusal;
    // policy(): the answer was OK (the services after it are not asked).
    bool permit = false;
};

class Restrictions {
public:
    // cfg, tables and aliases must outlive this (a session's Settings hold
    // them). client: "name[ip]", as the log names it. aliases: its
    // virtual_alias_maps keys are known recipients too, as postfix counts them.
    Restrictions(const smx::Config& cfg, const smx::PolicyTables& tables, std::string ip,
                 bool trusted, std::string client, const smx::Rewriter* aliases = nullptr);

    // The stages, each called as its command is taken. name: the client's
    // confirmed host name, or "unknown".
    Outcome connect(std::string_view name);
    Outcome helo(std::string_view helo);
    // A new transaction: what HOLD and DISCARD said of the last one is gone.
    Outcome mail(std::string_view sender);
    Outcome rcpt(std::string_view helo, std::string_view sender, std::string_view rcpt);

    // The message's fate, for its commit: discarded (250, never queued), or
    // held with this reason (empty: not held).
    bool discard() const { return discard_; }
    const std::string& hold() const { return hold_; }
    // The header fields PREPEND added to this transaction, in order
    // ("X-Name: value", no CRLF): they go above the Received: header.
    const std::vector<std::string>& prepend() const { return prepend_; }

    // A policy service's answer (smtps/policy_client.hpp) at a stage, as an
    // access(5) action in a list of its own that ends with it: its
    // DEFER_IF_PERMIT defers at once. name and what: as the stage's replies
    // name them ("u@x", "Recipient address"). failed: answer is
    // policy_service_default_action (no service answered).
    Outcome policy(std::string_view service, std::string name, std::string_view what,
                   const std::string& answer, bool failed);

private:
    class List;
    // A client_access answer for the session: the key that matched and its
    // value (none: no key did); done once looked up.
    struct Memo {
        bool done = false;
        std::string key;
        std::optional<std::string> value;
    };
    // The lists; each returns true when it refused (List::refusal set).
    bool client_list(List& l);
    bool helo_list(List& l, std::string_view helo);
    bool sender_list(List& l, std::string_view sender);

    const smx::Config& cfg_;
    const smx::PolicyTables& tables_;
    const smx::Rewriter* const aliases_;
    const RelayPolicy relay_;
    const std::string ip_;
    const bool trusted_;
    const std::string client_;
    std::string name_ = "unknown";
    Memo client_name_memo_, client_address_memo_;
    // DEFER_IF_PERMIT as each stage left it (postfix's defer_if_permit_client,
    // _helo, _sender): a permitted recipient is deferred with it.
    std::optional<Refusal> defer_client_, defer_helo_, defer_sender_;
    bool in_transaction_ = false;
    bool discard_ = false;
    std::string hold_;
    std::vector<std::string> prepend_;
};

} // namespace smx::smtps
