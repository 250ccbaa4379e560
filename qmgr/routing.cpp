#include "qmgr/routing.hpp"

namespace smx::qmgr {

bool Router::route(std::string_view domain, Destination& out) {
    const smx::Route* r = cfg_->route_for(std::string(domain));
    if (!r) return false;
    auto [it, fresh] = cache_.try_emplace(r, nullptr);
    if (fresh) {
        std::vector<std::string> nexthops = r->nexthops();
        std::string key;
        for (const auto& h : nexthops) {
            if (!key.empty()) key += ',';
            key += h;
        }
        it->second = &*hops_.try_emplace(std::move(key), std::move(nexthops)).first;
    }
    out.nexthops = &it->second->second;
    out.key = r->mx ? "mx:" + std::string(domain) : it->second->first;
    return true;
}

void Router::reload(std::shared_ptr<const smx::Config> cfg) {
    cache_.clear();
    cfg_ = std::move(cfg);
}

} // namespace smx::qmgr
