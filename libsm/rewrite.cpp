#include "libsm/rewrite.hpp"

#include "libsm/address.hpp"
#include "libsm/domain.hpp"
#include "libsm/dsn_params.hpp"

#include <algorithm>
#include <unordered_set>

namespace smx {
namespace {

using table::Status;

table::TableList open_list(const TableOpener& open, const char* key,
                           const std::vector<std::string>& specs) {
    try {
        return open(specs);
    } catch (const table::TableError& e) {
        throw table::TableError(std::string("rewrite.") + key + ": " + e.what());
    }
}

std::string lookup_failure(std::string_view addr) {
    return "451 4.3.0 <" + std::string(addr) + ">: Temporary lookup failure";
}

std::string expansion_error(std::string_view addr) {
    return "451 4.6.0 <" + std::string(addr) + ">: Alias expansion error";
}

// The parts of a table value: addresses separated by commas or white space;
// a double-quoted part (an aliases(5) "|command") is one.
std::vector<std::string> value_items(std::string_view v) {
    std::vector<std::string> items;
    std::string cur;
    bool quoted = false;
    for (const char c : v) {
        if (c == '"') quoted = !quoted;
        if (!quoted && (c == ',' || c == ' ' || c == '\t')) {
            if (!cur.empty()) items.push_back(std::move(cur));
            cur.clear();
            continue;
        }
        cur += c;
    }
    if (!cur.empty()) items.push_back(std::move(cur));
    return items;
}

// An aliases(5) target that is no address: "|command", "/file",
// ":include:/file", possibly quoted.
bool local_delivery(std::string_view item) {
    if (item.starts_with('"')) item.remove_prefix(1);
    return item.starts_with('|') || item.starts_with('/') ||
           (item.size() >= 9 && iequals(item.substr(0, 9), ":include:"));
}

std::string_view local_of(std::string_view addr) {
    const auto at = addr.rfind('@');
    return at == std::string_view::npos ? addr : addr.substr(0, at);
}

// ORCPT (RFC 3461 4.2) naming original, unless params has one or original
// cannot be one (8-bit: not an rfc822 address; too long for the limit).
std::string with_orcpt(std::string_view params, std::string_view original) {
    std::string p(params);
    if (dsn::param(params, "ORCPT")) return p;
    if (std::any_of(original.begin(), original.end(), [](char c) { return (c & 0x80) != 0; }))
        return p;
    std::string orcpt = "ORCPT=rfc822;" + dsn::xtext_encode(original);
    if (orcpt.size() - 6 > dsn::max_orcpt) return p;
    if (!p.empty()) p += ' ';
    return p + orcpt;
}

} // namespace

// What a lookup found, and the extension ("+ext") to carry over to the
// result when only the address without it matched (postfix's
// propagate_unmatched_extensions for canonical and virtual).
struct Rewriter::Match {
    Status status = Status::not_found;
    std::string value;
    std::string extension;
};

Rewriter::Rewriter(const RewriteConfig& cfg, const TableOpener& open)
    : delimiters_(cfg.recipient_delimiter),
      recursion_limit_(cfg.virtual_alias_recursion_limit),
      expansion_limit_(cfg.virtual_alias_expansion_limit),
      canonical_(open_list(open, "canonical_maps", cfg.canonical_maps)),
      sender_canonical_(open_list(open, "sender_canonical_maps", cfg.sender_canonical_maps)),
      recipient_canonical_(open_list(open, "recipient_canonical_maps", cfg.recipient_canonical_maps)),
      virtual_(open_list(open, "virtual_alias_maps", cfg.virtual_alias_maps)),
      aliases_(open_list(open, "alias_maps", cfg.alias_maps)),
      local_domains_(cfg.local_domains) {}

std::string Rewriter::extension_of(std::string_view addr) const {
    const std::string_view local = local_of(addr);
    const auto d = delimiters_.empty() ? std::string_view::npos : local.find_first_of(delimiters_);
    return d == std::string_view::npos || d == 0 ? std::string() : std::string(local.substr(d));
}

Rewriter::Match Rewriter::find(const table::TableList& tables, std::string_view addr) const {
    Match m;
    if (tables.empty()) return m;
    const auto keys = table::address_keys(addr, delimiters_, table::Order::address);
    for (std::size_t i = 0; i < keys.size(); ++i) {
        table::Lookup l = tables.find(keys[i], i > 0);
        if (l.status == Status::not_found) continue;
        m.status = l.status;
        m.value = std::move(l.value);
        // Only keys[0] has the extension: a later key carries it over.
        if (i > 0) m.extension = extension_of(addr);
        return m;
    }
    return m;
}

namespace {

// A table's result for addr: "@domain" keeps addr's local part; an
// extension that did not match is carried over into the result's local
// part; a result without a domain takes `domain`.
std::string result_address(std::string_view item, std::string_view addr, const std::string& extension,
                           std::string_view domain) {
    if (item.starts_with('@')) return std::string(local_of(addr)) + std::string(item);
    std::string r(item);
    if (r.find('@') == std::string::npos && !domain.empty()) r += "@" + std::string(domain);
    if (!extension.empty()) r.insert(r.rfind('@'), extension);
    return r;
}

} // namespace

RewriteResult Rewriter::canonical(const table::TableList& tables, const char* key,
                                  std::string& addr) const {
    if (tables.empty() || addr.empty()) return {};
    const std::string original = addr;
    std::unordered_set<std::string> seen{lower(addr)};
    for (unsigned depth = 0;; ++depth) {
        const Match m = find(tables, addr);
        if (m.status == Status::not_found) return {};
        if (m.status == Status::failed)
            return {lookup_failure(original), std::string(key) + " lookup failed for " + addr};
        const auto items = value_items(m.value);
        if (items.empty()) return {};
        const std::string next = result_address(items.front(), addr, m.extension, domain_part(addr));
        if (!valid_address(next, false, true))
            return {expansion_error(original),
                    std::string(key) + ": \"" + next + "\" for " + addr + " is not an address"};
        if (iequals(next, addr)) return {};
        if (!seen.insert(lower(next)).second || depth >= recursion_limit_)
            return {expansion_error(original),
                    std::string("unreasonable ") + key + " map nesting for " + original};
        addr = next;
    }
}

RewriteResult Rewriter::sender(std::string& addr) const {
    if (auto r = canonical(sender_canonical_, "sender_canonical_maps", addr); !r.ok()) return r;
    return canonical(canonical_, "canonical_maps", addr);
}

table::Status Rewriter::virtual_alias(std::string_view addr) const {
    return find(virtual_, addr).status;
}

// One recipient's expansion through virtual_alias_maps and alias_maps: a
// walk of the alias graph that expands each address once, keeps one that
// maps to itself (postfix's "expands into itself once"), refuses a cycle and
// what goes deeper or wider than the limits.
class Rewriter::Expansion {
public:
    Expansion(const Rewriter& rw, std::string_view original) : rw_(rw), original_(original) {}

    bool expand(const std::string& addr, unsigned depth) {
        const std::string k = lower(addr);
        if (self_.contains(k)) return emit(addr);
        if (expanded_.contains(k)) return true;  // reached before: its results are in
        auto [m, from] = lookup(addr);
        if (m.status == Status::failed) {
            result_ = {lookup_failure(original_), std::string(from) + " lookup failed for " + addr};
            return false;
        }
        if (m.status == Status::not_found) return emit(addr);
        if (depth >= rw_.recursion_limit_) {
            result_ = {expansion_error(original_),
                       std::string("unreasonable ") + from + " map nesting for " + std::string(original_)};
            return false;
        }
        expanded_.insert(k);
        chain_.push_back(k);
        // Unqualified results: an alias in the domain of its name, a
        // virtual alias in the first local domain (postfix's myorigin).
        const std::string_view domain = from == aliases_name || rw_.local_domains_.empty()
                                            ? domain_part(addr)
                                            : std::string_view(rw_.local_domains_.front());
        for (const auto& item : value_items(m.value)) {
            const std::string next = result_address(item, addr, m.extension, domain);
            if (local_delivery(item) || !valid_address(next, false, true)) {
                result_ = {"451 4.3.5 <" + std::string(original_) + ">: Alias expansion error",
                           std::string(from) + ": \"" + item + "\" for " + addr +
                               " is not an address (smx delivers to addresses only)"};
                return false;
            }
            const std::string nk = lower(next);
            if (nk == k) self_.insert(k);
            if (self_.contains(nk)) {
                if (!emit(next)) return false;
                continue;
            }
            if (std::find(chain_.begin(), chain_.end(), nk) != chain_.end()) {
                result_ = {expansion_error(original_),
                           std::string(from) + " loop for " + std::string(original_) + ": " + addr +
                               " -> " + next};
                return false;
            }
            if (!expand(next, depth + 1)) return false;
        }
        chain_.pop_back();
        return true;
    }

    std::vector<std::string> out;
    RewriteResult result_;

private:
    static constexpr const char* aliases_name = "alias_maps";

    std::pair<Match, const char*> lookup(const std::string& addr) const {
        Match m = rw_.find(rw_.virtual_, addr);
        if (m.status != Status::not_found || rw_.aliases_.empty()) return {m, "virtual_alias_maps"};
        const std::string domain = domain_of(addr);
        if (std::find(rw_.local_domains_.begin(), rw_.local_domains_.end(), domain) ==
            rw_.local_domains_.end())
            return {m, aliases_name};
        // aliases(5) keys are local names: the name, then without its extension.
        const std::string_view local = local_of(addr);
        const auto keys = table::address_keys(local, rw_.delimiters_, table::Order::address);
        for (std::size_t i = 0; i < keys.size(); ++i) {
            table::Lookup l = rw_.aliases_.find(keys[i], i > 0);
            if (l.status == Status::not_found) continue;
            // The extension is not carried over (postfix's default
            // propagate_unmatched_extensions leaves out aliases).
            m.status = l.status;
            m.value = std::move(l.value);
            break;
        }
        return {m, aliases_name};
    }

    bool emit(const std::string& addr) {
        // Without case, as postfix compares the addresses of an expansion.
        if (!emitted_.insert(lower(addr)).second) return true;
        out.push_back(addr);
        if (out.size() <= rw_.expansion_limit_) return true;
        result_ = {expansion_error(original_),
                   "unreasonable virtual_alias_maps map expansion size for " + std::string(original_)};
        return false;
    }

    const Rewriter& rw_;
    const std::string_view original_;
    std::unordered_set<std::string> expanded_, self_, emitted_;
    std::vector<std::string> chain_;
};

RewriteResult Rewriter::recipient(std::string_view addr, std::string_view params,
                                  std::vector<msg::Recipient>& out) const {
    std::string a(addr);
    if (auto r = canonical(recipient_canonical_, "recipient_canonical_maps", a); !r.ok()) return r;
    if (auto r = canonical(canonical_, "canonical_maps", a); !r.ok()) return r;
    Expansion x(*this, addr);
    if (virtual_.empty() && aliases_.empty()) x.out.push_back(std::move(a));
    else if (!x.expand(a, 0)) return x.result_;
    for (auto& r : x.out) {
        std::string p = r == addr ? std::string(params) : with_orcpt(params, addr);
        out.push_back({std::move(r), std::move(p)});
    }
    return {};
}

} // namespace smx
