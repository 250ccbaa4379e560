#include "smtps/command.hpp"

#include "smtps/policy.hpp"

#include <utility>

namespace smx::smtps {

namespace {
constexpr std::pair<std::string_view, Verb> verbs[] = {
    {"MAIL", Verb::mail}, {"RCPT", Verb::rcpt}, {"DATA", Verb::data},
    {"EHLO", Verb::ehlo}, {"HELO", Verb::helo}, {"RSET", Verb::rset},
    {"NOOP", Verb::noop}, {"QUIT", Verb::quit}, {"VRFY", Verb::vrfy},
    {"HELP", Verb::help}, {"STARTTLS", Verb::starttls}, {"BDAT", Verb::bdat}};
} // namespace

Verb parse_verb(std::string_view line, std::string_view& arg) {
    const auto sp = line.find(' ');
    const std::string_view v = line.substr(0, sp);
    arg = sp == std::string_view::npos ? std::string_view{} : line.substr(sp + 1);
    while (!arg.empty() && arg.back() == ' ') arg.remove_suffix(1);
    for (const auto& [name, verb] : verbs)
        if (iequals(v, name)) return verb;
    return Verb::unknown;
}

std::string_view verb_name(Verb v) {
    for (const auto& [name, verb] : verbs)
        if (verb == v) return name;
    return "UNKNOWN";
}

std::optional<Bdat> parse_bdat(std::string_view arg) {
    const auto sp = arg.find(' ');
    const std::string_view n = arg.substr(0, sp);
    Bdat b;
    if (sp != std::string_view::npos) {
        if (!iequals(arg.substr(sp + 1), "LAST")) return std::nullopt;
        b.last = true;
    }
    // 19 digits always fit in 64 bits.
    if (n.empty() || n.size() > 19) return std::nullopt;
    for (char c : n) {
        if (c < '0' || c > '9') return std::nullopt;
        b.size = b.size * 10 + static_cast<std::uint64_t>(c - '0');
    }
    return b;
}

} // namespace smx::smtps
