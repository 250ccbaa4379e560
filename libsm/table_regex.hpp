// Regular-expression tables, as postfix's pcre_table(5) and regexp_table(5)
// write them, matched with PCRE2:
//
//   /pattern/flags result        the result when the key matches
//   !/pattern/flags result       ... when it does not
//   if /pattern/flags            the rules up to the matching endif apply
//   endif                          only when the key matches (if !/.../: not)
//
// A rule is a logical line: a line starting with white space continues the
// one before; blank lines and lines whose first non-blank is '#' are
// skipped. The delimiter is the rule's first character ('/' by custom); a
// backslash escapes it in the pattern. The result may name what the
// pattern's groups captured: $1, ${1} or $(1); $$ is a '$'.
//
// A lookup tries the rules in order and answers with the first that
// matches: an ordered first-match table, unlike a hash.
#pragma once

#include "libsm/lookup_table.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace smx::table {

// pcre: takes PCRE2's syntax and the flags i m s x A E U X of
// pcre_table(5); regexp: takes POSIX extended (or, with x, basic) syntax,
// translated to PCRE2's, and the flags i x m of regexp_table(5).
enum class Dialect { pcre, regexp };

// Backtracking steps one match may take (PCRE2's match limit): a
// pathological pattern on a hostile header then fails the lookup in a few
// milliseconds instead of burning CPU for minutes.
inline constexpr std::uint32_t regex_match_limit = 1'000'000;
// The memory one match may take for its backtracking (KiB).
inline constexpr std::uint32_t regex_heap_limit_kib = 8 * 1024;

// One rule of a table's text, parsed but not compiled.
struct RegexRule {
    enum class Op { match, if_match, endif };
    Op op = Op::match;
    unsigned line = 0;
    std::string pattern;     // in PCRE2's syntax (regexp: translated)
    std::uint32_t options = 0;  // PCRE2 compile options
    bool negated = false;
    // match: the result, in pieces: literal text, or a group's number.
    struct Piece {
        std::string text;
        unsigned group = 0;  // > 0: what group `group` captured
    };
    std::vector<Piece> result;
    unsigned max_group = 0;  // the highest $n in the result
    std::size_t endif = 0;   // if_match: index of its endif
};

// The rules of text (a table file named name, for errors), in order;
// throws TextError "name, line N: ..." for a line that is not a rule: no
// closing delimiter, an unknown flag, a $n that is no number, $n in a
// negated rule, an endif without if or an if without endif, a line over
// max_line (table_text.hpp).
std::vector<RegexRule> parse_regex_text(std::string_view text, const std::string& name,
                                        Dialect dialect);

// regexp_table(5)'s POSIX pattern as PCRE2 reads it; extended: ERE (the
// default), else BRE. Throws TextError (without a line) for what has no
// PCRE2 form.
std::string posix_to_pcre2(std::string_view pattern, bool extended);

// The table of text: every pattern compiled (JIT when the machine has it);
// throws TableError "spec: name, line N: ..." for a rule that does not
// parse or compile.
std::shared_ptr<const Table> regex_table(const std::string& spec, std::string_view text,
                                         const std::string& name, Dialect dialect);

} // namespace smx::table
