// The verb of an SMTP command line (RFC 5321 4.1): pure parsing, no state.
#pragma once

#include <string_view>

namespace smtps {

enum class Verb { helo, ehlo, mail, rcpt, data, rset, noop, quit, vrfy, help, starttls, unknown };

// Splits "VERB arg" (verb case-insensitive); arg keeps its case, trailing
// spaces removed.
Verb parse_verb(std::string_view line, std::string_view& arg);

} // namespace smtps
