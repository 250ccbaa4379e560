// Routing: recipient address → destination (the nexthop list SMTPC gets).
// Recipients with the same destination share one scheduler queue and one
// concurrency window; "mx" routes are per recipient domain, since SMTPC looks
// up the MX of the recipient's domain.
#pragma once

#include "config.hpp"

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
    explicit Router(const sm::Config& cfg) : cfg_(cfg) {}
    // False when no route applies (no [routes] entry and no default).
    bool route(std::string_view domain, Destination& out);

private:
    struct Cached {
        std::string key;
        std::vector<std::string> nexthops;
    };
    const sm::Config& cfg_;
    // Keyed by the config's Route objects, which live as long as cfg_.
    std::unordered_map<const sm::Route*, Cached> cache_;
};

} // namespace smx::qmgr
