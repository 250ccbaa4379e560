#include "routing.hpp"

namespace smx::qmgr {

std::string domain_of(std::string_view addr) {
    auto at = addr.rfind('@');
    if (at == std::string_view::npos) return {};
    std::string d(addr.substr(at + 1));
    for (char& c : d)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return d;
}

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
