#include "routing.hpp"

namespace smx::qmgr {

bool Router::route(std::string_view domain, Destination& out) {
    const sm::Route* r = cfg_.route_for(std::string(domain));
    if (!r) return false;
    auto [it, fresh] = cache_.try_emplace(r);
    Cached& c = it->second;
    if (fresh) {
        c.nexthops = r->nexthops();
        for (const auto& h : c.nexthops) {
            if (!c.key.empty()) c.key += ',';
            c.key += h;
        }
    }
    out.nexthops = &c.nexthops;
    out.key = r->mx ? "mx:" + std::string(domain) : c.key;
    return true;
}

} // namespace smx::qmgr
