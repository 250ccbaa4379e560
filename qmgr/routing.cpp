#include "qmgr/routing.hpp"

#include "libsm/domain.hpp"
#include "libsm/smtp_io.hpp"

#include <spdlog/spdlog.h>

namespace smx::qmgr {
namespace {

using smx::table::Status;

smx::table::TableList open_list(const smx::TableOpener& open, const char* key,
                                const std::vector<std::string>& specs) {
    try {
        return open(specs);
    } catch (const smx::table::TableError& e) {
        throw smx::table::TableError(std::string("queue.") + key + ": " + e.what());
    }
}

Routing defer(std::string enhanced, std::string text) {
    return {Routing::Kind::defer, {}, {0, std::move(enhanced), std::move(text)}};
}

// The next hops of a value, separated by commas or white space.
std::vector<std::string> split_hops(std::string_view v) {
    std::vector<std::string> out;
    std::string cur;
    for (const char c : v) {
        if (c == ',' || c == ' ' || c == '\t') {
            if (!cur.empty()) out.push_back(std::move(cur));
            cur.clear();
        } else {
            cur += c;
        }
    }
    if (!cur.empty()) out.push_back(std::move(cur));
    return out;
}

// error: and retry: text, "5.1.1 text" or just text. QMGR's own reply:
// no SMTP code, the status says the class.
smx::msg::Reply reply_of(std::string_view text, const char* fallback) {
    auto [enhanced, rest] = smx::smtp::split_enhanced(text);
    return {0, std::string(enhanced.empty() ? fallback : enhanced),
            std::string(rest.empty() ? std::string_view("delivery refused by transport_maps") : rest)};
}

} // namespace

Router::Tables Router::open_tables(const smx::Config& cfg) const {
    return {open_list(open_, "transport_maps", cfg.queue.transport_maps),
            open_list(open_, "sender_dependent_relayhost_maps",
                      cfg.queue.sender_dependent_relayhost_maps)};
}

Router::Router(const smx::Config& cfg, smx::TableOpener open)
    : open_(std::move(open)), cfg_(std::shared_ptr<const smx::Config>(std::shared_ptr<void>(), &cfg)),
      tables_(open_tables(cfg)), delimiters_(cfg.rewrite.recipient_delimiter) {}

Routing Router::deliver(std::vector<std::string> nexthops) {
    std::string key;
    for (const auto& h : nexthops) {
        if (!key.empty()) key += ',';
        key += h;
    }
    auto it = hops_.try_emplace(key, std::move(nexthops)).first;
    return {Routing::Kind::deliver, {it->first, &it->second}, {}};
}

Routing Router::deliver(const smx::Route& r, std::string_view domain) {
    auto [it, fresh] = cache_.try_emplace(&r, nullptr);
    if (fresh) {
        const Routing d = deliver(r.nexthops());
        it->second = &*hops_.find(d.dest.key);
    }
    Routing out{Routing::Kind::deliver, {it->second->first, &it->second->second}, {}};
    if (r.mx) out.dest.key = "mx:" + std::string(domain);
    return out;
}

Routing Router::transport(std::string_view value, std::string_view rcpt) {
    const auto colon = value.find(':');
    const std::string name = smx::lower(value.substr(0, colon));
    const std::string_view nexthop =
        colon == std::string_view::npos ? std::string_view() : value.substr(colon + 1);
    if (name == "error") {
        Routing r{Routing::Kind::bounce, {}, reply_of(nexthop, "5.0.0")};
        if (r.reply.enhanced.front() != '5') r.kind = Routing::Kind::defer;
        return r;
    }
    if (name == "retry") {
        return {Routing::Kind::defer, {}, reply_of(nexthop, "4.0.0")};
    }
    if (!name.empty() && name != "smtp" && name != "relay") {
        spdlog::warn("transport_maps: \"{}\" for {}: unknown transport \"{}\" (smx delivers by "
                     "smtp only; also error: and retry:)",
                     value, rcpt, name);
        return defer("4.3.5", "mail transport unavailable: " + name);
    }
    return next_hops(nexthop, "transport_maps", value, rcpt);
}

Routing Router::next_hops(std::string_view list, const char* key, std::string_view value,
                          std::string_view rcpt) {
    std::vector<std::string> hops;
    for (const auto& h : split_hops(list)) {
        try {
            hops.push_back(smx::parse_hostport(key, h, 25).str());
        } catch (const smx::ConfigError& e) {
            spdlog::warn("{}: \"{}\" for {}: {}", key, value, rcpt, e.what());
            return defer("4.3.5", std::string("bad next hop in ") + key + ": " + h);
        }
    }
    if (hops.empty()) return {};
    return deliver(std::move(hops));
}

Routing Router::sender_relay(std::string_view sender, std::string_view rcpt) {
    if (tables_.sender_relay.empty()) return {};
    const auto keys = sender.empty()
                          ? std::vector<std::string>{"<>"}
                          : smx::table::address_keys(sender, delimiters_, smx::table::Order::address);
    const auto l = tables_.sender_relay.find_first(keys);
    if (l.status == Status::failed)
        return defer("4.3.0", "sender_dependent_relayhost_maps lookup failure");
    // DUNNO: no relay host of its own (as postfix reads it).
    if (l.status == Status::not_found || smx::iequals(l.value, "DUNNO")) return {};
    return next_hops(l.value, "sender_dependent_relayhost_maps", l.value, rcpt);
}

Routing Router::route(std::string_view rcpt, std::string_view sender) {
    const std::string domain = smx::domain_of(rcpt);
    if (!tables_.transport.empty()) {
        const auto l = tables_.transport.find_first(
            smx::table::address_keys(rcpt, delimiters_, smx::table::Order::transport));
        if (l.status == Status::failed) return defer("4.3.0", "transport_maps lookup failure");
        if (l.found()) {
            Routing r = transport(l.value, rcpt);
            if (r.kind != Routing::Kind::deliver || r.dest.nexthops) return r;
            return by_default(rcpt, domain, sender);  // an entry without a next hop
        }
    }
    const smx::Route* r = cfg_->route_for(domain);
    if (r && !(cfg_->default_route && r == &*cfg_->default_route)) return deliver(*r, domain);
    return by_default(rcpt, domain, sender);
}

Routing Router::by_default(std::string_view rcpt, const std::string& domain, std::string_view sender) {
    Routing s = sender_relay(sender, rcpt);
    if (s.kind != Routing::Kind::deliver || s.dest.nexthops) return s;
    if (!cfg_->default_route)
        return defer("4.4.4", "no route to " + (domain.empty() ? std::string(rcpt) : domain));
    return deliver(*cfg_->default_route, domain);
}

void Router::reload(std::shared_ptr<const smx::Config> cfg) {
    Tables next = open_tables(*cfg);
    tables_ = std::move(next);
    delimiters_ = cfg->rewrite.recipient_delimiter;
    cache_.clear();
    cfg_ = std::move(cfg);
}

} // namespace smx::qmgr
