// Envelope address syntax, the one place it is decided: SMTPS's MAIL and
// RCPT, and local submission (the sendmail command, and smx-pickup, which
// checks again what a local user wrote into the maildrop).
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace smx {

// "FROM:<addr> params" split into its parts; views into the command line.
struct PathArg {
    std::string_view addr;    // without angle brackets and source route
    std::string_view params;  // ESMTP parameters, trimmed
};

// Parses the argument of MAIL/RCPT after the verb; keyword is "FROM:" or
// "TO:". nullopt on a syntax error.
std::optional<PathArg> parse_path(std::string_view arg, std::string_view keyword);

// local@domain with an RFC 5321 dot-string or quoted local part and a host
// name or address literal, at most 254 bytes, never '<' or '>'. The null
// sender is valid only when allow_empty. utf8 (MAIL ... SMTPUTF8, RFC
// 6531): UTF-8 is allowed in both parts and must be well-formed.
bool valid_address(std::string_view addr, bool allow_empty, bool utf8 = false);
bool valid_utf8(std::string_view s);

// What makes two recipients the same one: the local part as written and the
// domain lower-cased (DNS names compare without case; local parts may not).
std::string address_key(std::string_view addr);

} // namespace smx
