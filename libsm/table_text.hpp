// The text form of a lookup table, as postmap(1) reads it: one "key value"
// per logical line; blank lines and lines whose first non-blank is '#' are
// skipped; a line that starts with white space continues the one before.
// The aliases(5) form writes "name: value, value". Keys are folded to lower
// case. This is the one parser of table text: `smx map build`, texthash:
// and inline: all read through it.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace smx::table {

enum class Syntax { table, aliases };

// A logical line longer than this is refused (postfix has no limit; a
// hostile or broken file must not take the memory of a build).
inline constexpr std::size_t max_line = 64 * 1024;

struct Entry {
    std::string key;    // folded to lower case
    std::string value;  // as written, outer white space trimmed
    unsigned line = 0;  // where its logical line starts
};

// What is wrong with a table source, with where: "FILE, line N: ...".
struct TextError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

// Calls `entry` for each entry of `text` in order; throws TextError naming
// `name` and the line for a line it cannot take (no value, a control byte in
// the key, a line over max_line). A key given twice is passed twice: the
// caller decides (postmap keeps the first and warns).
void parse_text(std::string_view text, const std::string& name, Syntax syntax,
                const std::function<void(Entry&&)>& entry);

} // namespace smx::table
