// Routing: recipient address → destination (the nexthop list SMTPC gets).
// Recipients with the same destination share one scheduler queue and one
// concurrency window; "mx" routes are per recipient domain, since SMTPC looks
// up the MX of the recipient's domain.
#pragma once

#include "libsm/config.hpp"

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

class Router {
public:
    // cfg is the start's and must outlive the Router, as it does the rest
    // of QMGR (not owned: the aliasing constructor with no owner).
    explicit Router(const smx::Config& cfg)
        : cfg_(std::shared_ptr<const smx::Config>(std::shared_ptr<void>(), &cfg)) {}
    // False when no route applies (no [routes] entry and no default).
    bool route(std::string_view domain, Destination& out);
    // Mail routed from now on follows cfg's [routes]; what the scheduler
    // already holds keeps the next hops it was given.
    void reload(std::shared_ptr<const smx::Config> cfg);

private:
    // A next-hop list and its key ("h1,h2").
    using Hops = std::pair<const std::string, std::vector<std::string>>;
    std::shared_ptr<const smx::Config> cfg_;
    // Keyed by cfg_'s Route objects; cleared when cfg_ is replaced.
    std::unordered_map<const smx::Route*, const Hops*> cache_;
    // Every next-hop list ever routed to, by key, kept across reloads: the
    // scheduler's destinations point into it. As many as distinct routes.
    std::unordered_map<std::string, std::vector<std::string>> hops_;
};

} // namespace smx::qmgr
