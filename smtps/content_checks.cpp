#include "smtps/content_checks.hpp"

#include "libsm/smtp_io.hpp"

#include <strings.h>

namespace smx::smtps {
namespace {

using smx::table::Lookup;

// What a table is asked, as postfix asks it: the field or line without its
// line end, a folded field's line breaks as "\n".
std::string key_of(std::string_view s) {
    if (s.ends_with("\r\n")) s.remove_suffix(2);
    else if (s.ends_with('\n')) s.remove_suffix(1);
    std::string k;
    k.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i)
        if (!(s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n')) k += s[i];
    return k;
}

// A table's text as stored content: "\n" (a $n of a folded field) as
// CRLF, a lone CR left out.
std::string as_lines(std::string_view text) {
    std::string s;
    for (const char c : text) {
        if (c == '\r') continue;
        if (c == '\n') s += '\r';
        s += c;
    }
    return s;
}

// "Name: value" with a printable name, each line break followed by a blank
// (a folded field, not a second one).
bool is_field(std::string_view text) {
    const auto colon = text.find(':');
    if (colon == 0 || colon == std::string_view::npos) return false;
    for (std::size_t i = 0; i < colon; ++i)
        if (text[i] <= ' ' || text[i] >= 127) return false;
    for (std::size_t nl = text.find('\n'); nl != std::string_view::npos; nl = text.find('\n', nl + 1))
        if (nl + 1 >= text.size() || (text[nl + 1] != ' ' && text[nl + 1] != '\t')) return false;
    return true;
}

bool is(std::string_view word, const char* name) {
    return word.size() == std::char_traits<char>::length(name) &&
           ::strncasecmp(word.data(), name, word.size()) == 0;
}

} // namespace

ContentChecks::ContentChecks(const table::TableList& header_checks,
                             const table::TableList& body_checks, std::uint64_t header_size_limit,
                             std::uint64_t body_checks_size_limit, Emit emit, Log log)
    : header_checks_(header_checks), body_checks_(body_checks), body_limit_(body_checks_size_limit),
      emit_(std::move(emit)), log_(std::move(log)), parts_(header_size_limit) {}

void ContentChecks::log(std::string_view action, std::string_view what, std::string_view key,
                        std::string_view text) {
    std::string content;
    for (const char c : key.substr(0, 400))
        if (c != '\n') content += c;
    content = smx::smtp::printable(content.substr(0, 200));
    log_(CheckEvent{action, what, content, smx::smtp::printable(text)});
}

void ContentChecks::header(std::string_view field) {
    if (stopped()) return;
    if (header_checks_.empty()) return out(field);
    check(header_checks_, "header", field);
}

void ContentChecks::check(const table::TableList& tables, std::string_view what,
                          std::string_view item) {
    const std::string key = key_of(item);
    const Lookup l = tables.find(key);
    if (l.failed()) {
        const std::string name = std::string(what) + "_checks";
        verdict_ = {ContentVerdict::Kind::tempfail, "451 4.3.0 Error: temporary " + name + " lookup failure",
                    smx::Rejection::policy_unavailable, {}};
        return log("failed", what, key, name + " lookup failed");
    }
    if (!l.found() || act(l.value, what, key, item)) out(item);
}

void ContentChecks::end_of_headers(bool blank_line) {
    if (blank_line) out("\r\n");
}

void ContentChecks::body(std::string_view bytes) {
    while (!bytes.empty() && !stopped()) {
        if (line_.empty() && (body_checks_.empty() || body_seen_ >= body_limit_)) return out(bytes);
        const auto lf = bytes.find('\n');
        const std::size_t n = std::min(lf == std::string_view::npos ? bytes.size() : lf + 1,
                                       body_check_piece - line_.size());
        line_ += bytes.substr(0, n);
        body_seen_ += n;
        bytes.remove_prefix(n);
        if (line_.back() == '\n' || line_.size() == body_check_piece) {
            body_line(line_);
            line_.clear();
        }
    }
}

void ContentChecks::finish() {
    if (header_checks_.empty() && body_checks_.empty()) return;
    parts_.finish(*this);
    if (!line_.empty()) body_line(line_);
    line_.clear();
}

void ContentChecks::body_line(std::string_view line) {
    if (!stopped()) check(body_checks_, "body", line);
}

bool ContentChecks::act(std::string_view value, std::string_view what, std::string_view key,
                        std::string_view original) {
    const bool header = what == "header";
    const auto sp = value.find_first_of(" \t");
    const std::string_view word = value.substr(0, sp);
    std::string_view text = sp == std::string_view::npos ? std::string_view() : value.substr(sp);
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);

    if (is(word, "REJECT")) {
        auto [dsn, rest] = smx::smtp::split_enhanced(text);
        const std::string status = dsn.empty() ? "5.7.1" : std::string(dsn);
        const std::string said = status + " " + smx::smtp::printable(rest.empty() ? "message content rejected" : rest);
        verdict_ = {ContentVerdict::Kind::reject, (status[0] == '4' ? "451 " : "550 ") + said,
                    header ? smx::Rejection::header_check : smx::Rejection::body_check, verdict_.hold};
        log("reject", what, key, said);
        return false;
    }
    if (is(word, "DISCARD")) {
        verdict_.kind = ContentVerdict::Kind::discard;
        log("discard", what, key, text);
        return false;
    }
    if (is(word, "HOLD")) {
        if (verdict_.hold.empty()) {
            std::string why = std::string(what) + " " + std::string(key.substr(0, 100));
            if (!text.empty()) why += ": " + std::string(text);
            verdict_.hold = smx::smtp::printable(why);
        }
        log("hold", what, key, text);
        return true;
    }
    if (is(word, "WARN")) {
        log("warning", what, key, text);
        return true;
    }
    if (is(word, "INFO")) {
        log("info", what, key, text);
        return true;
    }
    if (is(word, "IGNORE")) return false;
    if (is(word, "DUNNO") || is(word, "OK")) return true;
    const bool prepend = is(word, "PREPEND");
    if (prepend || is(word, "REPLACE")) {
        std::string line = as_lines(text);
        if (text.empty() || (header && !is_field(text))) {
            log("unsupported", what, key,
                std::string(word) + " needs " + (header ? "a header field (\"Name: value\")" : "a line") +
                    ", not \"" + std::string(text) + "\": ignored");
            return true;
        }
        if (added_ + line.size() + 2 > max_check_additions) {
            log("unsupported", what, key,
                std::string(word) + " past the " + std::to_string(max_check_additions) +
                    " bytes PREPEND and REPLACE may add to a message: ignored");
            return true;
        }
        added_ += line.size() + 2;
        log(prepend ? "prepend" : "replace", what, key, text);
        if (prepend || original.ends_with('\n')) line += "\r\n";
        out(line);
        return prepend;
    }
    // FILTER, REDIRECT, BCC (they change where the message goes: not yet
    // in smx) and words postfix does not know either.
    log("unsupported", what, key, "action \"" + std::string(value.substr(0, 100)) + "\" is not supported: ignored");
    return true;
}

} // namespace smx::smtps
