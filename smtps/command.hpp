// The verb of an SMTP command line (RFC 5321 4.1): pure parsing, no state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace smx::smtps {

enum class Verb { helo, ehlo, mail, rcpt, data, rset, noop, quit, vrfy, help, starttls, bdat,
                  unknown };
inline constexpr std::size_t verb_count = static_cast<std::size_t>(Verb::unknown) + 1;

// Its name in upper case, as postfix logs where something happened
// ("MAIL"; "UNKNOWN").
std::string_view verb_name(Verb v);

// Splits "VERB arg" (verb case-insensitive); arg keeps its case, trailing
// spaces removed.
Verb parse_verb(std::string_view line, std::string_view& arg);

// The argument of BDAT (RFC 3030): "size" or "size LAST".
struct Bdat {
    std::uint64_t size = 0;
    bool last = false;
};
std::optional<Bdat> parse_bdat(std::string_view arg);

} // namespace smx::smtps
