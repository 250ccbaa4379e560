#include "smtps/restrictions.hpp"

#include "libsm/domain.hpp"
#include "libsm/smtp_io.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

namespace smx::smtps {
namespace {

using smx::table::Lookup;
using smx::table::TableList;

// What an entry (or the relay decision) says of a list: go on to the next
// check, permit the rest of the list, or refuse (the refusal is set).
enum class Step { dunno, permit, refused };

// An SMTP reply is one line of at most 512 octets with its CRLF, printable.
constexpr std::size_t max_reply = 510;

// PREPEND: a header field line of at most 998 octets (RFC 5322 2.1.1),
// "Name: value", printable; at most this many per message.
constexpr std::size_t max_prepend_size = 998;
constexpr std::size_t max_prepends = 20;

bool header_field(std::string_view h) {
    const auto colon = h.find(':');
    if (colon == 0 || colon == std::string_view::npos || h.size() > max_prepend_size) return false;
    for (std::size_t i = 0; i < h.size(); ++i) {
        const auto c = static_cast<unsigned char>(h[i]);
        if (i < colon ? (c <= ' ' || c >= 127) : (c < ' ' && c != '\t') || c == 127) return false;
    }
    return true;
}

bool keyword(std::string_view word, std::string_view name) {
    return word.size() == name.size() && smx::iequals(word, name);
}

// "4.7.1 text": the enhanced code a table's text may begin with (RFC 3463:
// class 2, 4 or 5, subject and detail of 1 to 3 digits), and the rest.
std::pair<std::string, std::string_view> split_enhanced(std::string_view text,
                                                        std::string_view fallback) {
    std::size_t i = 0;
    const auto digits = [&](std::size_t max) {
        const std::size_t from = i;
        while (i < text.size() && i - from < max && std::isdigit(static_cast<unsigned char>(text[i])))
            ++i;
        return i > from;
    };
    const bool ok = !text.empty() && (text[0] == '2' || text[0] == '4' || text[0] == '5') &&
                    ++i && i < text.size() && text[i++] == '.' && digits(3) && i < text.size() &&
                    text[i++] == '.' && digits(3) && (i == text.size() || text[i] == ' ' || text[i] == '\t');
    if (!ok) return {std::string(fallback), text};
    std::string code(text.substr(0, i));
    text.remove_prefix(i);
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
    return {std::move(code), text};
}

std::vector<std::string> helo_keys(std::string_view helo) {
    // An address literal is looked up as written; a name with its parents.
    if (!helo.empty() && helo.front() == '[') return {smx::lower(helo)};
    return smx::table::domain_keys(helo, false);
}

} // namespace

// One restriction list being evaluated (postfix's generic_checks between two
// SMTPD_CHECK_RESETs): the name and class its replies give, and its
// DEFER_IF_REJECT.
class Restrictions::List {
public:
    // name: what the replies put in <>; what: "Client host", "Helo command",
    // "Sender address", "Recipient address".
    // why: the reason its refusals are counted under.
    List(Restrictions& r, Outcome& out, std::optional<Refusal>& defer_if_permit, std::string name,
         std::string_view what, smx::Rejection why = smx::Rejection::access_denied)
        : r_(r), out_(out), defer_if_permit_(defer_if_permit), name_(std::move(name)), what_(what),
          why_(why) {}

    // The first of keys that the tables of config key `key` have, taken as an
    // access(5) action. keys(): made only when there are tables (no work
    // per command without them).
    // memo: the answer kept for the session, for what does not change in it
    // (the client), so that delay_reject's list at each RCPT looks up nothing.
    template <class Keys>
    Step check(const char* key, const TableList& tables, Keys&& keys, Memo* memo = nullptr) {
        if (tables.empty()) return Step::dunno;
        if (memo && memo->done)
            return memo->value ? action(origin(key, memo->key), *memo->value) : Step::dunno;
        const std::vector<std::string> all = keys();
        for (std::size_t i = 0; i < all.size(); ++i) {
            const std::string& k = all[i];
            const Lookup l = tables.find(k, i > 0);
            if (l.failed()) {
                spdlog::warn("{}: lookup of \"{}\" failed", key, k);
                return refuse(smx::Rejection::policy_unavailable,
                              "451 4.3.0 <" + name_ + ">: Temporary lookup failure");
            }
            if (l.found()) {
                if (memo) *memo = Memo{true, k, l.value};
                return action(origin(key, k), l.value);
            }
        }
        if (memo) *memo = Memo{true, {}, std::nullopt};
        return Step::dunno;
    }

    // A refusal by this list. A 5xx after a DEFER_IF_REJECT of this list
    // becomes that deferral, as postfix's smtpd_check_reject does.
    Step reject(smx::Rejection why, std::string reply) {
        if (reply.starts_with('5') && defer_if_reject_)
            return refuse(defer_if_reject_->why, defer_if_reject_->reply);
        return refuse(why, std::move(reply));
    }
    // A refusal no DEFER_IF_REJECT changes (temporary failures).
    Step refuse(smx::Rejection why, std::string reply) {
        out_.refusal = Refusal{why, std::move(reply)};
        return Step::refused;
    }
    bool refused() const { return out_.refusal.has_value(); }

    // "<code> <dsn> <name>: <what> rejected: <text>"; text may begin with its
    // own enhanced code.
    std::string reply(unsigned code, std::string_view text, std::string_view default_text) const {
        const std::string def = std::to_string(code / 100) + ".7.1";
        auto [dsn, rest] = split_enhanced(text, def);
        dsn[0] = static_cast<char>('0' + code / 100);  // the SMTP code's class wins
        std::string r = std::to_string(code) + " " + dsn + " <" + name_ + ">: " + std::string(what_) +
                        " rejected: " + std::string(rest.empty() ? default_text : rest);
        if (r.size() > max_reply) r.resize(max_reply);
        for (char& c : r)
            if (c < ' ' || c > '~') c = '?';
        return r;
    }

    // value as an access(5) action; origin names where it came from in
    // warnings: "policy.sender_access: key \"u@x\"".
    Step action(const std::string& origin, const std::string& value) {
        std::string_view v(value);
        const auto sp = v.find_first_of(" \t");
        const std::string_view word = v.substr(0, sp);
        std::string_view text = sp == std::string_view::npos ? std::string_view() : v.substr(sp);
        while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
        const bool numeric = !word.empty() && std::all_of(word.begin(), word.end(), [](char c) {
            return std::isdigit(static_cast<unsigned char>(c));
        });
        if (keyword(word, "DUNNO")) return Step::dunno;
        // An all-numeric value is OK too (postfix: some POP-before-SMTP
        // tools store a time stamp).
        if (keyword(word, "OK") || keyword(word, "RELAY") || (numeric && text.empty()))
            return Step::permit;
        if (keyword(word, "REJECT"))
            return reject(why_, reply(554, text, "Access denied"));
        if (keyword(word, "DEFER"))
            return reject(why_, reply(450, text, "Access denied"));
        if (numeric && word.size() == 3 && (word[0] == '4' || word[0] == '5'))
            return reject(why_,
                          reply(static_cast<unsigned>(std::stoul(std::string(word))), text,
                                "Access denied"));
        if (keyword(word, "DEFER_IF_PERMIT")) {
            if (!defer_if_permit_)
                defer_if_permit_ = Refusal{why_,
                                           reply(450, text, "Service unavailable")};
            return Step::dunno;
        }
        if (keyword(word, "DEFER_IF_REJECT")) {
            if (!defer_if_reject_)
                defer_if_reject_ = Refusal{why_,
                                           reply(450, text, "Service unavailable")};
            return Step::dunno;
        }
        const bool hold = keyword(word, "HOLD");
        if (hold || keyword(word, "DISCARD")) {
            if (!r_.in_transaction_) {
                // No message yet to hold or discard: the client and HELO
                // lists run at their own commands without delay_reject.
                spdlog::warn("{}: action {} skipped: no transaction yet (with policy.delay_reject "
                             "= false, the client and HELO stages come before MAIL)",
                             origin, word);
                return Step::dunno;
            }
            std::string note = "<" + name_ + ">: " + std::string(what_) + " " +
                               std::string(text.empty() ? (hold ? "triggers HOLD action"
                                                                : "triggers DISCARD action")
                                                        : text);
            if (hold) {
                if (!r_.hold_.empty()) return Step::dunno;
                r_.hold_ = note;
                out_.notes.push_back({"hold", std::move(note)});
                return Step::dunno;
            }
            r_.discard_ = true;
            out_.notes.push_back({"discard", std::move(note)});
            return Step::permit;
        }
        if (keyword(word, "WARN") || keyword(word, "INFO")) {
            out_.notes.push_back({keyword(word, "WARN") ? "warn" : "info", std::string(text)});
            return Step::dunno;
        }
        if (keyword(word, "PREPEND")) {
            if (!r_.in_transaction_) {
                spdlog::warn("{}: action PREPEND skipped: no transaction yet", origin);
            } else if (!header_field(text)) {
                spdlog::warn("{}: PREPEND skipped: \"{}\" is no header field of at most {} octets",
                             origin, smx::smtp::printable(text.substr(0, 100)), max_prepend_size);
            } else if (r_.prepend_.size() >= max_prepends) {
                spdlog::warn("{}: PREPEND skipped: the message has {} prepended headers already",
                             origin, max_prepends);
            } else {
                r_.prepend_.emplace_back(text);
            }
            return Step::dunno;
        }
        // postfix takes it for the name of a restriction; smx has none to
        // offer, and answers as postfix does for an unknown one.
        spdlog::warn("{}: unknown action \"{}\" (OK, REJECT, DEFER, DEFER_IF_PERMIT, "
                     "DEFER_IF_REJECT, DISCARD, HOLD, PREPEND, WARN, INFO, DUNNO or 4NN/5NN text)",
                     origin, smx::smtp::printable(value));
        return refuse(smx::Rejection::policy_unavailable, "451 4.3.5 Server configuration error");
    }

private:
    static std::string origin(const char* key, const std::string& k) {
        return std::string(key) + ": key \"" + k + "\"";
    }

    Restrictions& r_;
    Outcome& out_;
    std::optional<Refusal>& defer_if_permit_;
    std::optional<Refusal> defer_if_reject_;
    const std::string name_;
    const std::string_view what_;
    const smx::Rejection why_;
};

Restrictions::Restrictions(const smx::Config& cfg, const smx::PolicyTables& tables, std::string ip,
                           bool trusted, std::string client, const smx::Rewriter* aliases)
    : cfg_(cfg), tables_(tables), aliases_(aliases), relay_(cfg.server), ip_(std::move(ip)), trusted_(trusted),
      client_(std::move(client)) {}

bool Restrictions::client_list(List& l) {
    // As postfix's check_client_access: the name and its parents, then the
    // address and its networks.
    Step s = Step::dunno;
    if (name_ != "unknown")
        s = l.check("policy.client_access", tables_.client_access,
                    [&] { return smx::table::domain_keys(name_, false); }, &client_name_memo_);
    if (s == Step::dunno)
        l.check("policy.client_access", tables_.client_access,
                [&] { return smx::table::client_address_keys(ip_); }, &client_address_memo_);
    return l.refused();
}

bool Restrictions::helo_list(List& l, std::string_view helo) {
    l.check("policy.helo_access", tables_.helo_access, [&] { return helo_keys(helo); });
    return l.refused();
}

bool Restrictions::sender_list(List& l, std::string_view sender) {
    l.check("policy.sender_access", tables_.sender_access, [&] {
        return smx::table::address_keys(sender, cfg_.rewrite.recipient_delimiter,
                                        smx::table::Order::access);
    });
    return l.refused();
}

Outcome Restrictions::connect(std::string_view name) {
    name_.assign(name);
    client_name_memo_ = Memo();
    Outcome out;
    defer_client_.reset();
    if (cfg_.policy.delay_reject) return out;
    List l(*this, out, defer_client_, client_, "Client host");
    client_list(l);
    return out;
}

Outcome Restrictions::helo(std::string_view helo) {
    Outcome out;
    defer_helo_ = defer_client_;
    if (cfg_.policy.delay_reject) return out;
    List l(*this, out, defer_helo_, std::string(helo), "Helo command");
    helo_list(l, helo);
    return out;
}

Outcome Restrictions::mail(std::string_view sender) {
    Outcome out;
    in_transaction_ = true;
    discard_ = false;
    hold_.clear();
    prepend_.clear();
    defer_sender_ = defer_helo_;
    if (cfg_.policy.delay_reject) return out;
    List l(*this, out, defer_sender_, std::string(sender), "Sender address");
    sender_list(l, sender);
    return out;
}

Outcome Restrictions::rcpt(std::string_view helo, std::string_view sender, std::string_view rcpt) {
    Outcome out;
    if (cfg_.policy.delay_reject) {
        // postfix's smtpd_check_rcpt: the earlier lists again, each with
        // the DEFER_IF_PERMIT the stage before it left.
        defer_client_.reset();
        List c(*this, out, defer_client_, client_, "Client host");
        if (client_list(c)) return out;
        defer_helo_ = defer_client_;
        List h(*this, out, defer_helo_, std::string(helo), "Helo command");
        if (helo_list(h, helo)) return out;
        defer_sender_ = defer_helo_;
        List s(*this, out, defer_sender_, std::string(sender), "Sender address");
        if (sender_list(s, sender)) return out;
    }
    std::optional<Refusal> defer_if_permit = defer_sender_;
    List l(*this, out, defer_if_permit, std::string(rcpt), "Recipient address");
    l.check("policy.recipient_access", tables_.recipient_access, [&] {
        return smx::table::address_keys(rcpt, cfg_.rewrite.recipient_delimiter,
                                        smx::table::Order::access);
    });
    if (l.refused()) return out;
    // The relay decision, a list of its own (postfix's smtpd_relay_restrictions:
    // permit_mynetworks, permit_auth_destination, reject): an OK above does not
    // open the relay. Untrusted clients may not route through us in the local
    // part ("u@evil"@relay, u%evil@relay, evil!u@relay).
    const std::string_view domain = smx::domain_part(rcpt);
    const bool relay_domain = relay_.relay_domain(domain);
    const bool routed = !trusted_ && !cfg_.server.allow_untrusted_routing && routes_in_local_part(rcpt);
    if (!trusted_ && (routed || !relay_domain)) {
        l.reject(smx::Rejection::relay_denied, "554 5.7.1 <" + std::string(rcpt) + ">: Relay access denied");
        return out;
    }
    if (defer_if_permit) {
        out.refusal = std::move(defer_if_permit);
        return out;
    }
    // postfix's implicit reject_unlisted_recipient, for every client: a
    // recipient of relay_domains must be a known one.
    if (discard_ || !relay_domain || tables_.relay_recipient_maps.empty()) return out;
    Lookup known = tables_.relay_recipient_maps.find_first(smx::table::address_keys(
        rcpt, cfg_.rewrite.recipient_delimiter, smx::table::Order::address));
    if (known.status == smx::table::Status::not_found && aliases_)
        known.status = aliases_->virtual_alias(rcpt);
    if (known.failed()) {
        spdlog::warn("policy.relay_recipient_maps: lookup of <{}> failed", rcpt);
        l.refuse(smx::Rejection::policy_unavailable,
                 "451 4.3.0 <" + std::string(rcpt) + ">: Temporary lookup failure");
    } else if (!known.found()) {
        l.reject(smx::Rejection::unknown_recipient,
                 "550 5.1.1 <" + std::string(rcpt) +
                     ">: Recipient address rejected: User unknown in relay recipient table");
    }
    return out;
}

Outcome Restrictions::policy(std::string_view service, std::string name, std::string_view what,
                             const std::string& answer, bool failed) {
    Outcome out;
    std::optional<Refusal> defer_if_permit;
    List l(*this, out, defer_if_permit, std::move(name), what,
           failed ? smx::Rejection::policy_service_failure : smx::Rejection::policy_service);
    const Step s = l.action(std::string(failed ? "policy.policy_service_default_action for "
                                               : "policy server ") +
                                std::string(service),
                            answer);
    // Nothing follows the service in its list: a DEFER_IF_PERMIT defers now.
    if (s != Step::refused && defer_if_permit) out.refusal = std::move(defer_if_permit);
    out.permit = s == Step::permit;
    return out;
}

} // namespace smx::smtps
