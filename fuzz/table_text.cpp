// The table text parser (libsm/table_text.hpp), in both syntaxes, whole and
// a line at a time, and inline: tables. Oracles: the two ways give the same
// entries or the same error; every entry has a key with no blank or control
// character, folded to lower case, and a value; a line number no greater
// than the lines given.
#include "libsm/lookup_table.hpp"
#include "libsm/table_text.hpp"

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using smx::table::Entry;

struct Outcome {
    std::vector<Entry> entries;
    std::string error;
};

void check(const Entry& e, unsigned lines) {
    if (e.key.empty() || e.value.empty() || e.line == 0 || e.line > lines) std::abort();
    for (const char c : e.key) {
        const auto u = static_cast<unsigned char>(c);
        if (u <= 0x20 || u == 0x7f || (c >= 'A' && c <= 'Z')) std::abort();
    }
}

Outcome whole(std::string_view text, smx::table::Syntax s) {
    Outcome o;
    try {
        smx::table::parse_text(text, "f", s, [&](Entry&& e) { o.entries.push_back(std::move(e)); });
    } catch (const smx::table::TextError& e) {
        o.error = e.what();
    }
    return o;
}

Outcome by_line(std::string_view text, smx::table::Syntax s) {
    Outcome o;
    try {
        smx::table::TextParser p("f", s, [&](Entry&& e) { o.entries.push_back(std::move(e)); });
        while (!text.empty()) {
            const auto nl = text.find('\n');
            p.line(text.substr(0, nl));
            text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        }
        p.finish();
    } catch (const smx::table::TextError& e) {
        o.error = e.what();
    }
    return o;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    unsigned lines = 1;
    for (const char c : in) lines += c == '\n';
    for (const auto s : {smx::table::Syntax::table, smx::table::Syntax::aliases}) {
        const Outcome a = whole(in, s);
        const Outcome b = by_line(in, s);
        if (a.error != b.error || a.entries.size() != b.entries.size()) std::abort();
        for (std::size_t i = 0; i < a.entries.size(); ++i) {
            check(a.entries[i], lines);
            if (a.entries[i].key != b.entries[i].key || a.entries[i].value != b.entries[i].value ||
                a.entries[i].line != b.entries[i].line)
                std::abort();
        }
    }
    // The same bytes as an inline: table: opened, or refused with a TableError.
    try {
        const auto t = smx::table::open("inline:{" + std::string(in) + "}");
        t->each([](std::string_view k, std::string_view) {
            if (k.empty()) std::abort();
        });
    } catch (const smx::table::TableError&) {
    }
    return 0;
}
