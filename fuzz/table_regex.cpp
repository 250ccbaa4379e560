// The pcre: and regexp: table parser and compiler (libsm/table_regex.hpp).
// Oracles: a text is parsed into rules or refused with a TextError naming a
// line no greater than the lines given; every if has its endif after it;
// a text that parses either compiles into a table or is refused with a
// TableError; a table answers a lookup of the text itself (found, not
// found or failed at the match limit) without crashing.
#include "libsm/table_regex.hpp"
#include "libsm/table_text.hpp"

#include <cstdlib>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    unsigned lines = 1;
    for (const char c : in) lines += c == '\n';
    for (const auto d : {smx::table::Dialect::pcre, smx::table::Dialect::regexp}) {
        std::vector<smx::table::RegexRule> rules;
        try {
            rules = smx::table::parse_regex_text(in, "f", d);
        } catch (const smx::table::TextError&) {
            continue;
        }
        for (std::size_t i = 0; i < rules.size(); ++i) {
            const auto& r = rules[i];
            if (r.line == 0 || r.line > lines) std::abort();
            if (r.op == smx::table::RegexRule::Op::if_match &&
                (r.endif <= i || r.endif >= rules.size() ||
                 rules[r.endif].op != smx::table::RegexRule::Op::endif))
                std::abort();
        }
        try {
            const auto t = smx::table::regex_table("pcre:/f", in, "f", d);
            const auto l = t->find(in);
            if (l.status == smx::table::Status::not_found && !l.value.empty()) std::abort();
        } catch (const smx::table::TableError&) {
        }
    }
    return 0;
}
