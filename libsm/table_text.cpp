#include "libsm/table_text.hpp"

#include "libsm/domain.hpp"

namespace smx::table {
namespace {

bool blank(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && (blank(s.front()) || s.front() == '\r' || s.front() == '\n'))
        s.remove_prefix(1);
    while (!s.empty() && (blank(s.back()) || s.back() == '\r' || s.back() == '\n'))
        s.remove_suffix(1);
    return s;
}

[[noreturn]] void fail(const std::string& name, unsigned line, const std::string& what) {
    throw TextError(name + ", line " + std::to_string(line) + ": " + what);
}

// One logical line (continuations joined by a space) into its entry.
Entry split(std::string_view text, const std::string& name, unsigned line, Syntax syntax) {
    std::size_t end = 0;
    if (syntax == Syntax::aliases) {
        end = text.find(':');
        if (end == std::string_view::npos)
            fail(name, line, "expected \"name: address, ...\"");
    } else {
        while (end < text.size() && !blank(text[end])) ++end;
    }
    const std::string_view key = trim(text.substr(0, end));
    const std::string_view value =
        trim(end < text.size() ? text.substr(end + (syntax == Syntax::aliases)) : std::string_view());
    if (key.empty()) fail(name, line, "no key before the value");
    for (const char c : key) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x21 || u == 0x7f)
            fail(name, line, "the key holds a control character or a space");
    }
    if (value.empty())
        fail(name, line,
             syntax == Syntax::aliases ? "no address after \"" + std::string(key) + ":\""
                                       : "expected \"key whitespace value\", found no value for \"" +
                                             std::string(key) + "\"");
    return Entry{smx::lower(key), std::string(value), line};
}

} // namespace

void parse_text(std::string_view text, const std::string& name, Syntax syntax,
                const std::function<void(Entry&&)>& entry) {
    std::string logical;
    unsigned start = 0;  // the logical line's first line; 0: none yet
    unsigned line = 0;
    const auto finish = [&] {
        if (start != 0) entry(split(logical, name, start, syntax));
        logical.clear();
        start = 0;
    };
    while (!text.empty()) {
        ++line;
        const std::size_t nl = text.find('\n');
        std::string_view l = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        if (l.find('\0') != std::string_view::npos) fail(name, line, "a NUL byte");
        const std::string_view content = trim(l);
        if (content.empty() || content.front() == '#') continue;
        if (blank(l.front())) {
            if (start == 0) fail(name, line, "a continuation line with no line to continue");
            if (logical.size() + 1 + content.size() > max_line)
                fail(name, start, "a logical line longer than " + std::to_string(max_line) + " bytes");
            logical += ' ';
            logical += content;
            continue;
        }
        finish();
        if (content.size() > max_line)
            fail(name, line, "a line longer than " + std::to_string(max_line) + " bytes");
        logical.assign(content);
        start = line;
    }
    finish();
}

} // namespace smx::table
