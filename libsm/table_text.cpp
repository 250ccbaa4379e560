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

TextParser::TextParser(std::string name, Syntax syntax, std::function<void(Entry&&)> entry)
    : name_(std::move(name)), syntax_(syntax), entry_(std::move(entry)) {}

void TextParser::finish() {
    if (start_ != 0) entry_(split(logical_, name_, start_, syntax_));
    logical_.clear();
    start_ = 0;
}

void TextParser::line(std::string_view l) {
    ++line_;
    if (l.find('\0') != std::string_view::npos) fail(name_, line_, "a NUL byte");
    const std::string_view content = trim(l);
    // A comment too: `smx map build` holds no longer line.
    if (content.size() > max_line)
        fail(name_, line_, "a line longer than " + std::to_string(max_line) + " bytes");
    if (content.empty() || content.front() == '#') return;
    if (blank(l.front())) {
        if (start_ == 0) fail(name_, line_, "a continuation line with no line to continue");
        if (logical_.size() + 1 + content.size() > max_line)
            fail(name_, start_, "a logical line longer than " + std::to_string(max_line) + " bytes");
        logical_ += ' ';
        logical_ += content;
        return;
    }
    finish();
    logical_.assign(content);
    start_ = line_;
}

void parse_text(std::string_view text, const std::string& name, Syntax syntax,
                const std::function<void(Entry&&)>& entry) {
    TextParser p(name, syntax, entry);
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        p.line(text.substr(0, nl));
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    }
    p.finish();
}

} // namespace smx::table
