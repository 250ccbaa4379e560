// What SMTPS accepts: the relay decision (address syntax: libsm/address.hpp).
#pragma once

#include "libsm/address.hpp"
#include "libsm/config.hpp"
#include "libsm/domain.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace smx::smtps {

using smx::parse_path;
using smx::PathArg;
using smx::valid_address;
using smx::valid_utf8;

// The local part (before the last '@') holds '@', '%' or '!': source routing
// that would make the next hop relay elsewhere.
bool routes_in_local_part(std::string_view addr);

using smx::iequals;
using smx::istarts_with;

class RelayPolicy {
public:
    explicit RelayPolicy(const smx::ServerConfig& cfg) : cfg_(cfg) {}
    // The client may relay anywhere (relay_networks); also exempts it from
    // the per-client connection limit.
    bool trusted_client(const std::string& ip) const;
    // The recipient domain is one we relay for: an exact relay_domains
    // entry, or a subdomain of an entry written with a leading dot.
    bool relay_domain(std::string_view domain) const;

private:
    const smx::ServerConfig& cfg_;
};

} // namespace smx::smtps
