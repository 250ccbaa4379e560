// What SMTPS accepts: envelope address syntax and the relay decision.
#pragma once

#include "config.hpp"
#include "domain.hpp"

#include <optional>
#include <string>
#include <string_view>

namespace smtps {

// "FROM:<addr> params" split into its parts; views into the command line.
struct PathArg {
    std::string_view addr;    // without angle brackets and source route
    std::string_view params;  // ESMTP parameters, trimmed
};

// Parses the argument of MAIL/RCPT after the verb; keyword is "FROM:" or
// "TO:". nullopt on a syntax error.
std::optional<PathArg> parse_path(std::string_view arg, std::string_view keyword);

// local@domain with an RFC 5321 dot-string or quoted local part and a host
// name or address literal. The null sender is valid only when allow_empty.
// utf8 (MAIL ... SMTPUTF8, RFC 6531): UTF-8 is allowed in both parts and
// must be well-formed.
bool valid_address(std::string_view addr, bool allow_empty, bool utf8 = false);
bool valid_utf8(std::string_view s);

// The local part (before the last '@') holds '@', '%' or '!': source routing
// that would make the next hop relay elsewhere.
bool routes_in_local_part(std::string_view addr);

using sm::iequals;
bool istarts_with(std::string_view s, std::string_view prefix);

class RelayPolicy {
public:
    explicit RelayPolicy(const sm::ServerConfig& cfg) : cfg_(cfg) {}
    // The client may relay anywhere (relay_networks); also exempts it from
    // the per-client connection limit.
    bool trusted_client(const std::string& ip) const;
    // The recipient domain is one we relay for: an exact relay_domains
    // entry, or a subdomain of an entry written with a leading dot.
    bool relay_domain(std::string_view domain) const;

private:
    const sm::ServerConfig& cfg_;
};

} // namespace smtps
