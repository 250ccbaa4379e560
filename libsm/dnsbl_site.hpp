// One entry of dnsbl.sites, in postfix's postscreen_dnsbl_sites syntax:
// "zone[=filter][*weight]". The filter says which answers count (each of its
// four octets a number or a bracketed list of numbers and ranges,
// "127.0.0.[2..11;20]"; none: every answer); the weight is what a listing
// adds to the client's score (negative: an allow list, DNSWL).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace smx {

struct DnsblSite {
    std::string zone;  // lower case, without a final dot
    // Per octet of an answer, the ranges (inclusive) it must fall in; an
    // empty filter takes every answer.
    using Octet = std::vector<std::pair<std::uint8_t, std::uint8_t>>;
    std::vector<Octet> filter;  // empty or 4 octets
    int weight = 1;
    std::string text;  // as written (logs, `smx config`)

    // An answer address (host byte order) counts.
    bool matches(std::uint32_t addr) const;
    // The DNS name to look up for an IPv4 or IPv6 client address
    // ("2.0.0.127.zone"); empty for anything else.
    std::string query_name(const std::string& client_ip) const;
};

// Throws ConfigError(key, ...) for a bad entry.
DnsblSite parse_dnsbl_site(const std::string& key, const std::string& s);

} // namespace smx
