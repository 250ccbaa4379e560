// Domains in addresses: the one place that finds and lower-cases them, for
// SMTPS's relay check, QMGR's routing, SMTPC's next hops and the config's
// domain tables. DNS names compare case-insensitively in ASCII only
// (RFC 4343): bytes outside A-Z, UTF-8 in SMTPUTF8 domains among them, are
// left as they are, in any locale.
#pragma once

#include <string>
#include <string_view>

namespace smx {

constexpr char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }
std::string lower(std::string_view s);
// For SMTP keywords (EHLO extensions, AUTH mechanisms), ASCII only as well.
std::string upper(std::string_view s);
// Equal but for the case of ASCII letters.
bool iequals(std::string_view a, std::string_view b);
// s begins with prefix, but for the case of ASCII letters.
bool istarts_with(std::string_view s, std::string_view prefix);

// The part after the last '@' as written, or empty when there is no '@'.
std::string_view domain_part(std::string_view addr);
// domain_part, lower-cased: the key routes and caches use.
std::string domain_of(std::string_view addr);

} // namespace smx
