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

// parse_text a line at a time, for a source too big to hold (`smx map
// build` of a million entries): line() each physical line in order, without
// its '\n', then finish(). The same entries and errors as parse_text.
class TextParser {
public:
    TextParser(std::string name, Syntax syntax, std::function<void(Entry&&)> entry);
    void line(std::string_view l);
    void finish();
    // Physical lines given so far.
    unsigned lines() const { return line_; }

private:
    const std::string name_;
    const Syntax syntax_;
    const std::function<void(Entry&&)> entry_;
    std::string logical_;
    unsigned start_ = 0;  // the logical line's first line; 0: none yet
    unsigned line_ = 0;
};

} // namespace smx::table
