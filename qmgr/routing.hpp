// Routing: recipient (and sender) → destination, the nexthop list SMTPC
// gets. Searched as postfix's trivial-rewrite does (docs/config.md, Routing):
//   1. queue.transport_maps, transport(5) entries by the recipient address
//      and domain (user+ext@domain, user@domain, domain, .parent, *):
//      "smtp:[host]:port", "smtp:host" (its MX), ":[host]" (next hop only),
//      "error:5.1.1 text" (bounce), "retry:4.3.2 text" (defer); an entry
//      without a next hop (":", "smtp:") goes on with 3 and 4;
//   2. [routes] entries for the domain (exact, then ".parent"), one more
//      table after transport_maps;
//   3. queue.sender_dependent_relayhost_maps by the sender (user@domain,
//      @domain; "<>" for the null sender): overrides the default route only;
//   4. the [routes] default (none without a default when [routes] exists).
// smx delivers by SMTP only: another transport name is a temporary failure
// that names it, never a delivery elsewhere. A table that fails defers the
// recipient (4.3.0).
//
// Recipients with the same destination share one scheduler queue and one
// concurrency window; the key is the nexthop list, so recipients routed to
// the same hosts by different rules or senders share it, and "mx" routes
// are per recipient domain, since SMTPC looks up the MX of that domain.
#pragma once

#include "libsm/config.hpp"
#include "libsm/lookup_table.hpp"
#include "libsm/messages.hpp"
#include "libsm/rewrite.hpp"

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace smx::qmgr {

struct Destination {
    std::string key;                     // scheduler queue key
    const std::vector<std::string>* nexthops = nullptr;  // for DELIVER
};

// What routing decided for one recipient.
struct Routing {
    enum class Kind { deliver, bounce, defer } kind = Kind::deliver;
    Destination dest;       // deliver
    smx::msg::Reply reply;  // bounce, defer: why
};

class Router {
public:
    // cfg is the start's and must outlive the Router, as it does the rest
    // of QMGR (not owned: the aliasing constructor with no owner). Opens
    // the routing tables (smx::table::TableError naming key and table).
    explicit Router(const smx::Config& cfg,
                    smx::TableOpener open = smx::table::TableList::open);
    Routing route(std::string_view rcpt, std::string_view sender);
    // Mail routed from now on follows cfg's [routes] and tables; what the
    // scheduler already holds keeps the next hops it was given. Throws
    // TableError (the running tables stay) when one cannot be opened.
    void reload(std::shared_ptr<const smx::Config> cfg);

private:
    struct Tables {
        smx::table::TableList transport, sender_relay;
    };
    Tables open_tables(const smx::Config& cfg) const;
    Routing deliver(const smx::Route& r, std::string_view domain);
    Routing deliver(std::vector<std::string> nexthops);
    // The next hops of a table's value (list: "[a]:25, b"; key names the
    // table in a refusal); a deliver with no nexthops when list has none.
    Routing next_hops(std::string_view list, const char* key, std::string_view value,
                      std::string_view rcpt);
    // A transport(5) value; empty nexthops in a deliver: none given.
    Routing transport(std::string_view value, std::string_view rcpt);
    // The sender's relay host, or a deliver with no nexthops when it has none.
    Routing sender_relay(std::string_view sender, std::string_view rcpt);
    // What the default route gives: the sender's relay host, else the
    // [routes] default, else none.
    Routing by_default(std::string_view rcpt, const std::string& domain, std::string_view sender);

    const smx::TableOpener open_;
    std::shared_ptr<const smx::Config> cfg_;
    Tables tables_;
    std::string delimiters_;  // rewrite.recipient_delimiter
    // A next-hop list and its key ("h1,h2").
    using Hops = std::pair<const std::string, std::vector<std::string>>;
    // Keyed by cfg_'s Route objects; cleared when cfg_ is replaced.
    std::unordered_map<const smx::Route*, const Hops*> cache_;
    // Every next-hop list ever routed to, by key, kept across reloads: the
    // scheduler's destinations point into it. As many as distinct next-hop
    // lists in the routes and tables.
    std::unordered_map<std::string, std::vector<std::string>> hops_;
};

} // namespace smx::qmgr
