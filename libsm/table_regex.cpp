#include "libsm/table_regex.hpp"

#include "libsm/table_text.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <cctype>

namespace smx::table {
namespace {

bool space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\v' || c == '\f'; }
bool alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }

[[noreturn]] void fail(const std::string& name, unsigned line, const std::string& what) {
    throw TextError(name + ", line " + std::to_string(line) + ": " + what);
}

// The logical lines of text as postfix's readlline joins them: a line that
// starts with white space is appended to the one before as it is.
template <class F>
void logical_lines(std::string_view text, const std::string& name, F&& each) {
    std::string logical;
    unsigned start = 0, line = 0;
    while (!text.empty()) {
        const std::size_t nl = text.find('\n');
        std::string_view l = text.substr(0, nl);
        text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
        ++line;
        if (l.find('\0') != std::string_view::npos) fail(name, line, "a NUL byte");
        if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
        std::size_t first = 0;
        while (first < l.size() && space(l[first])) ++first;
        if (first == l.size() || l[first] == '#') continue;
        if (first == 0) {
            if (start != 0) each(start, std::string_view(logical));
            logical.clear();
            start = line;
        } else if (start == 0) {
            fail(name, line, "a continuation line with no line to continue");
        }
        if (logical.size() + l.size() > max_line)
            fail(name, start, "a logical line longer than " + std::to_string(max_line) + " bytes");
        logical += l;
    }
    if (start != 0) each(start, std::string_view(logical));
}

// "/pattern/flags" at the start of p (after any '!'s, each negating);
// p is left after the flags.
void take_pattern(std::string_view& p, const std::string& name, unsigned line, Dialect dialect,
                  RegexRule& r) {
    for (; !p.empty() && (p.front() == '!' || space(p.front())); p.remove_prefix(1))
        if (p.front() == '!') r.negated = !r.negated;
    if (p.empty()) fail(name, line, "no pattern");
    const char delim = p.front();
    p.remove_prefix(1);
    std::size_t end = 0;
    for (; end < p.size() && p[end] != delim; ++end)
        if (p[end] == '\\' && end + 1 < p.size()) ++end;
    if (end >= p.size())
        fail(name, line, std::string("no closing delimiter \"") + delim + "\" after the pattern");
    std::string pattern(p.substr(0, end));
    p.remove_prefix(end + 1);
    // pcre_table(5): case-insensitive and '.' matching a newline unless
    // toggled; regexp_table(5): REG_ICASE and REG_EXTENDED unless toggled,
    // and without REG_NEWLINE '.' matches a newline and '$' only the end.
    bool caseless = true, extended = true, newline = false;
    std::uint32_t options = dialect == Dialect::pcre ? PCRE2_DOTALL : 0;
    for (; !p.empty() && !space(p.front()); p.remove_prefix(1)) {
        const char f = p.front();
        if (f == 'i') caseless = !caseless;
        else if (dialect == Dialect::regexp && f == 'x') extended = !extended;
        else if (dialect == Dialect::regexp && f == 'm') newline = !newline;
        else if (dialect == Dialect::regexp) fail(name, line, std::string("unknown flag \"") + f + "\" (regexp: takes i x m)");
        else if (f == 'm') options ^= PCRE2_MULTILINE;
        else if (f == 's') options ^= PCRE2_DOTALL;
        else if (f == 'x') options ^= PCRE2_EXTENDED;
        else if (f == 'A') options ^= PCRE2_ANCHORED;
        else if (f == 'E') options ^= PCRE2_DOLLAR_ENDONLY;
        else if (f == 'U') options ^= PCRE2_UNGREEDY;
        else if (f == 'X') continue;  // PCRE_EXTRA: PCRE2 has it always, as postfix says
        else fail(name, line, std::string("unknown flag \"") + f + "\" (pcre: takes i m s x A E U X)");
    }
    if (caseless) options |= PCRE2_CASELESS;
    if (dialect == Dialect::regexp) {
        options |= newline ? PCRE2_MULTILINE : PCRE2_DOTALL | PCRE2_DOLLAR_ENDONLY;
        try {
            pattern = posix_to_pcre2(pattern, extended);
        } catch (const TextError& e) {
            fail(name, line, e.what());
        }
    }
    r.pattern = std::move(pattern);
    r.options = options;
}

// The result's $n, ${n}, $(n) and $$, as postfix's mac_parse reads them.
void take_result(std::string_view p, const std::string& name, unsigned line, RegexRule& r) {
    std::string literal;
    const auto group = [&](std::string_view n) {
        if (n.empty() || n.size() > 2 ||
            !std::all_of(n.begin(), n.end(), [](char c) { return c >= '0' && c <= '9'; }))
            fail(name, line, "\"$" + std::string(n) + "\" in the result is not $1 to $99");
        const unsigned g = static_cast<unsigned>(std::stoi(std::string(n)));
        if (g == 0) fail(name, line, "$0 in the result: groups count from $1");
        if (!literal.empty()) r.result.push_back({std::move(literal), 0});
        literal.clear();
        r.result.push_back({{}, g});
        r.max_group = std::max(r.max_group, g);
    };
    while (!p.empty()) {
        const char c = p.front();
        p.remove_prefix(1);
        if (c != '$' || p.empty()) {
            literal += c;
        } else if (p.front() == '$') {
            literal += '$';
            p.remove_prefix(1);
        } else if (p.front() == '{' || p.front() == '(') {
            const char close = p.front() == '{' ? '}' : ')';
            const auto e = p.find(close);
            if (e == std::string_view::npos)
                fail(name, line, std::string("no \"") + close + "\" after \"$" + p.front() + "\" in the result");
            group(p.substr(1, e - 1));
            p.remove_prefix(e + 1);
        } else if (alnum(p.front()) || p.front() == '_') {
            std::size_t e = 0;
            while (e < p.size() && (alnum(p[e]) || p[e] == '_')) ++e;
            group(p.substr(0, e));
            p.remove_prefix(e);
        } else {
            literal += c;
        }
    }
    if (!literal.empty()) r.result.push_back({std::move(literal), 0});
    if (r.negated && r.max_group > 0) fail(name, line, "$" + std::to_string(r.max_group) + " in the result of a negated pattern");
}

// ERE/BRE's [...] at p (after its '['), into out; p past its ']'. A
// backslash in a POSIX bracket is an ordinary character.
void bracket(std::string_view& p, std::string& out) {
    out += '[';
    if (!p.empty() && p.front() == '^') {
        out += '^';
        p.remove_prefix(1);
    }
    bool first = true;
    while (!p.empty()) {
        const char c = p.front();
        if (c == ']' && !first) {
            out += ']';
            p.remove_prefix(1);
            return;
        }
        first = false;
        if (c == '[' && p.size() > 1 && (p[1] == ':' || p[1] == '.' || p[1] == '=')) {
            const char kind = p[1];
            const auto e = p.find(std::string{kind, ']'}, 2);
            if (e == std::string_view::npos) throw TextError("an unterminated [" + std::string(1, kind) + " in a bracket");
            const std::string_view inner = p.substr(2, e - 2);
            if (kind == ':') {
                out += p.substr(0, e + 2);
            } else if (inner.size() == 1) {
                out += '\\';  // a collating element or class of one character: itself
                out += inner;
            } else {
                throw TextError("collating elements and equivalence classes other than one character are not supported");
            }
            p.remove_prefix(e + 2);
            continue;
        }
        if (c == '\\' || c == '[' || c == ']') out += '\\';
        out += c;
        p.remove_prefix(1);
    }
    throw TextError("a \"[\" without its \"]\"");
}

} // namespace

std::string posix_to_pcre2(std::string_view p, bool extended) {
    std::string out;
    bool at_start = true;  // where a BRE's '*' is literal and '^' an anchor
    while (!p.empty()) {
        const char c = p.front();
        p.remove_prefix(1);
        const bool start = at_start;
        at_start = false;
        if (c == '[') {
            bracket(p, out);
        } else if (c == '\\') {
            if (p.empty()) throw TextError("a \"\\\" at the end of the pattern");
            const char e = p.front();
            p.remove_prefix(1);
            if (!extended && (e == '(' || e == '|')) {
                out += e;
                at_start = true;
            } else if (!extended && (e == ')' || e == '{' || e == '}' || e == '+' || e == '?')) {
                out += e;
                if (e == '{' && !p.empty() && p.front() == ',') out += '0';
            } else if (e == '<') {
                out += "\\b(?=\\w)";  // GNU's word start and end
            } else if (e == '>') {
                out += "\\b(?<=\\w)";
            } else if (e == '`') {
                out += "\\A";
            } else if (e == '\'') {
                out += "\\z";
            } else if (alnum(e) && !std::isdigit(static_cast<unsigned char>(e)) &&
                       std::string_view("wWsSbB").find(e) == std::string_view::npos) {
                out += e;  // POSIX leaves \n, \t, \d ... undefined; glibc: the letter
            } else {
                out += '\\';
                out += e;
            }
        } else if (!extended && (c == '(' || c == ')' || c == '{' || c == '}' || c == '|' ||
                                 c == '+' || c == '?')) {
            out += '\\';
            out += c;
        } else if (!extended && c == '*' && start) {
            out += "\\*";
        } else if (!extended && c == '^' && !start) {
            out += "\\^";
        } else if (!extended && c == '$' && !(p.empty() || p.starts_with("\\)") || p.starts_with("\\|"))) {
            out += "\\$";
        } else if (extended && c == '{' && !p.empty() && p.front() == ',') {
            out += "{0";  // glibc's {,n}
        } else {
            out += c;
            if (extended && (c == '(' || c == '|')) at_start = true;
            if (c == '^') at_start = true;
        }
    }
    return out;
}

std::vector<RegexRule> parse_regex_text(std::string_view text, const std::string& name,
                                        Dialect dialect) {
    std::vector<RegexRule> rules;
    std::vector<std::size_t> open_ifs;
    logical_lines(text, name, [&](unsigned line, std::string_view l) {
        while (!l.empty() && space(l.back())) l.remove_suffix(1);
        RegexRule r;
        r.line = line;
        const auto word = [&l](std::string_view w) {
            if (l.size() < w.size() || (l.size() > w.size() && alnum(l[w.size()]))) return false;
            for (std::size_t i = 0; i < w.size(); ++i)
                if (std::tolower(static_cast<unsigned char>(l[i])) != w[i]) return false;
            return true;
        };
        if (!alnum(l.front())) {
            take_pattern(l, name, line, dialect, r);
            while (!l.empty() && space(l.front())) l.remove_prefix(1);
            take_result(l, name, line, r);
        } else if (word("if")) {
            l.remove_prefix(2);
            r.op = RegexRule::Op::if_match;
            take_pattern(l, name, line, dialect, r);
            while (!l.empty() && space(l.front())) l.remove_prefix(1);
            if (!l.empty())
                fail(name, line, "text after the pattern of an if (a rule inside if ... endif starts at the beginning of its line)");
            open_ifs.push_back(rules.size());
        } else if (word("endif")) {
            l.remove_prefix(5);
            r.op = RegexRule::Op::endif;
            if (open_ifs.empty()) fail(name, line, "endif without if");
            if (l.find_first_not_of(" \t") != std::string_view::npos) fail(name, line, "text after endif");
            rules[open_ifs.back()].endif = rules.size();
            open_ifs.pop_back();
        } else {
            fail(name, line, "expected /pattern/ result, if /pattern/ or endif");
        }
        rules.push_back(std::move(r));
    });
    if (!open_ifs.empty()) fail(name, rules[open_ifs.back()].line, "if without endif");
    return rules;
}

namespace {

struct CodeFree {
    void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};
struct MatchDataFree {
    void operator()(pcre2_match_data* m) const { pcre2_match_data_free(m); }
};
struct ContextFree {
    void operator()(pcre2_match_context* m) const { pcre2_match_context_free(m); }
};
struct JitStackFree {
    void operator()(pcre2_jit_stack* s) const { pcre2_jit_stack_free(s); }
};

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    const int n = pcre2_get_error_message(code, buf, sizeof buf);
    return n > 0 ? std::string(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n))
                 : "PCRE2 error " + std::to_string(code);
}

// What one thread matches with: the limits, a JIT stack of its own (a
// pattern whose JIT code needs more than the default 32 KiB of machine
// stack), match data for the largest pattern.
struct Matcher {
    std::unique_ptr<pcre2_match_context, ContextFree> context{pcre2_match_context_create(nullptr)};
    std::unique_ptr<pcre2_jit_stack, JitStackFree> jit{pcre2_jit_stack_create(32 * 1024, 1024 * 1024, nullptr)};
    std::unique_ptr<pcre2_match_data, MatchDataFree> data;
    std::uint32_t pairs = 0;

    Matcher() {
        if (!context || !jit) throw std::bad_alloc();
        pcre2_set_match_limit(context.get(), regex_match_limit);
        pcre2_set_heap_limit(context.get(), regex_heap_limit_kib);
        pcre2_jit_stack_assign(context.get(), nullptr, jit.get());
    }
    pcre2_match_data* for_groups(std::uint32_t groups) {
        if (!data || pairs < groups + 1) {
            data.reset(pcre2_match_data_create(groups + 1, nullptr));
            if (!data) throw std::bad_alloc();
            pairs = groups + 1;
        }
        return data.get();
    }
};

class RegexTable final : public Table {
public:
    RegexTable(std::string spec, std::vector<RegexRule> rules, const std::string& name)
        : Table(std::move(spec)), rules_(std::move(rules)) {
        code_.reserve(rules_.size());
        for (const auto& r : rules_) {
            if (r.op == RegexRule::Op::endif) {
                code_.emplace_back();
                continue;
            }
            int err = 0;
            PCRE2_SIZE offset = 0;
            std::unique_ptr<pcre2_code, CodeFree> code(pcre2_compile(
                reinterpret_cast<PCRE2_SPTR>(r.pattern.data()), r.pattern.size(), r.options, &err,
                &offset, nullptr));
            if (!code)
                throw TableError(this->spec() + ": " + name + ", line " + std::to_string(r.line) +
                                 ": error in the pattern at offset " + std::to_string(offset) + ": " +
                                 pcre2_message(err));
            std::uint32_t groups = 0;
            pcre2_pattern_info(code.get(), PCRE2_INFO_CAPTURECOUNT, &groups);
            if (r.max_group > groups)
                throw TableError(this->spec() + ": " + name + ", line " + std::to_string(r.line) +
                                 ": the result names $" + std::to_string(r.max_group) +
                                 " but the pattern has " + std::to_string(groups) + " group" +
                                 (groups == 1 ? "" : "s"));
            groups_ = std::max(groups_, groups);
            // Without JIT (a machine or build without it) PCRE2 interprets:
            // slower, bounded the same.
            pcre2_jit_compile(code.get(), PCRE2_JIT_COMPLETE);
            code_.push_back(std::move(code));
        }
    }

    bool pattern() const override { return true; }

    Lookup find(std::string_view key) const override {
        thread_local Matcher m;
        pcre2_match_data* data = m.for_groups(groups_);
        // PCRE2 10.42 refuses a null subject even of length 0.
        const auto subject = reinterpret_cast<PCRE2_SPTR>(key.data() ? key.data() : "");
        for (std::size_t i = 0; i < rules_.size(); ++i) {
            const RegexRule& r = rules_[i];
            if (r.op == RegexRule::Op::endif) continue;
            const int rc = pcre2_match(code_[i].get(), subject, key.size(), 0, 0, data, m.context.get());
            if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) return {Status::failed, {}};
            const bool matched = (rc >= 0) != r.negated;
            if (r.op == RegexRule::Op::if_match) {
                if (!matched) i = r.endif;
                continue;
            }
            if (!matched) continue;
            Lookup l{Status::found, {}};
            const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
            for (const auto& piece : r.result) {
                if (piece.group == 0) {
                    l.value += piece.text;
                } else if (static_cast<int>(piece.group) < rc && ov[2 * piece.group] != PCRE2_UNSET) {
                    l.value += key.substr(ov[2 * piece.group], ov[2 * piece.group + 1] - ov[2 * piece.group]);
                }
            }
            return l;
        }
        return {};
    }

private:
    std::vector<RegexRule> rules_;
    std::vector<std::unique_ptr<pcre2_code, CodeFree>> code_;  // by rule; null for endif
    std::uint32_t groups_ = 0;  // the most of any pattern
};

} // namespace

std::shared_ptr<const Table> regex_table(const std::string& spec, std::string_view text,
                                         const std::string& name, Dialect dialect) {
    std::vector<RegexRule> rules;
    try {
        rules = parse_regex_text(text, name, dialect);
    } catch (const TextError& e) {
        throw TableError(spec + ": " + e.what());
    }
    return std::make_shared<RegexTable>(spec, std::move(rules), name);
}

} // namespace smx::table
