// JSON string quoting, for the CLI's --json output and QMGR's queue reports.
#pragma once

#include <string>
#include <string_view>

namespace smx {

// s as a JSON string literal, quotes included (control characters and DEL
// escaped; bytes >= 0x80 pass as they are). Also a TOML basic string.
std::string json_string(std::string_view s);

} // namespace smx
