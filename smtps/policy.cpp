#include "smtps/policy.hpp"

#include <string>

namespace smx::smtps {

bool routes_in_local_part(std::string_view addr) {
    const auto at = addr.rfind('@');
    const std::string_view local = addr.substr(0, at == std::string_view::npos ? addr.size() : at);
    return local.find_first_of("@%!") != std::string_view::npos;
}

bool RelayPolicy::trusted_client(const std::string& ip) const {
    return cfg_.in_relay_networks(ip);
}

bool RelayPolicy::relay_domain(std::string_view domain) const {
    if (domain.empty()) return false;
    for (const auto& d : cfg_.relay_domains) {
        if (iequals(domain, d)) return true;
        if (!d.empty() && d.front() == '.' && domain.size() > d.size() &&
            iequals(domain.substr(domain.size() - d.size()), d))
            return true;
    }
    return false;
}

} // namespace smx::smtps
