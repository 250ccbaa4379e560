// Envelope rewriting ([rewrite], docs/config.md): canonical maps for the
// sender and the recipients, then virtual aliases and aliases(5) for the
// recipients, as postfix's cleanup does. It runs once, where an envelope is
// made (SMTPS at MAIL and RCPT, smx-pickup before its commit), so that the
// envelope log, recovery and DEFEDB hold only rewritten addresses. Nothing
// here does I/O but table lookups; a lookup that fails is a temporary
// refusal, never a pass.
#pragma once

#include "libsm/config.hpp"
#include "libsm/lookup_table.hpp"
#include "libsm/messages.hpp"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace smx {

// Why an address was not taken: the SMTP reply ("451 4.3.0 <a>: Temporary
// lookup failure") and, for what the administrator must fix (a loop, a limit,
// an alias smx cannot deliver to), a warning for the log. Empty reply: taken.
struct RewriteResult {
    std::string reply;
    std::string warning;
    bool ok() const { return reply.empty(); }
};

// Opens the tables of one key: smx::table::TableList::open, or a test's.
using TableOpener = std::function<table::TableList(const std::vector<std::string>& specs)>;

class Rewriter {
public:
    // No rewriting at all.
    Rewriter() = default;
    // Opens the tables of cfg (smx::table::TableError naming the key and
    // the table that cannot be).
    explicit Rewriter(const RewriteConfig& cfg, const TableOpener& open = table::TableList::open);

    // The sender after sender_canonical_maps, then canonical_maps; the null
    // sender stays as it is.
    RewriteResult sender(std::string& addr) const;

    // The recipients addr stands for: recipient_canonical_maps and
    // canonical_maps, then virtual_alias_maps (and alias_maps for a local
    // domain) expanded recursively, duplicates dropped. A recipient that
    // ends up another address gets ORCPT=rfc822;<addr> unless params has an
    // ORCPT, so that DSNs name what the client asked for; the rest of params
    // (NOTIFY) goes with each. Appends to out only when it returns ok.
    RewriteResult recipient(std::string_view addr, std::string_view params,
                            std::vector<msg::Recipient>& out) const;

    // Whether virtual_alias_maps has addr (as postfix counts virtual alias
    // keys as known recipients): found, not_found or failed.
    table::Status virtual_alias(std::string_view addr) const;

private:
    struct Match;
    // "+ext" of addr's local part with recipient_delimiter "+"; empty without.
    std::string extension_of(std::string_view addr) const;
    // The first entry of tables for addr in virtual(5)/canonical(5) order
    // (user+ext@domain, user@domain, @domain), or failed.
    Match find(const table::TableList& tables, std::string_view addr) const;
    // One-to-one rewriting through one list of tables, repeated until an
    // address maps to itself or to nothing.
    RewriteResult canonical(const table::TableList& tables, const char* key,
                            std::string& addr) const;
    class Expansion;

    std::string delimiters_;
    unsigned recursion_limit_ = 1000;
    unsigned expansion_limit_ = 1000;
    table::TableList canonical_, sender_canonical_, recipient_canonical_, virtual_, aliases_;
    std::vector<std::string> local_domains_;
};

} // namespace smx
