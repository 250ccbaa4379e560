#include "libsm/dsn_params.hpp"

#include "libsm/domain.hpp"
#include "libsm/smtp_io.hpp"

#include <cctype>
#include <vector>

namespace smx::dsn {
namespace {

bool is_upper_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'); }

int hex_value(char c) { return c <= '9' ? c - '0' : c - 'A' + 10; }

std::string_view key_of(std::string_view kv) { return kv.substr(0, kv.find('=')); }

// The value after "KEY=", or nullopt without '='.
std::optional<std::string_view> value_of(std::string_view kv) {
    const auto eq = kv.find('=');
    if (eq == std::string_view::npos) return std::nullopt;
    return kv.substr(eq + 1);
}

template <class F>
void each_param(std::string_view params, F&& f) {
    while (!params.empty()) {
        const auto sp = params.find(' ');
        const std::string_view kv = params.substr(0, sp);
        params.remove_prefix(sp == std::string_view::npos ? params.size() : sp + 1);
        if (!kv.empty()) f(kv);
    }
}

// NOTIFY=NEVER alone, or a list of SUCCESS, FAILURE and DELAY, each once.
std::optional<Notify> parse_notify(std::string_view v) {
    Notify n;
    n.given = true;
    n.failure = n.delay = false;
    if (iequals(v, "NEVER")) return n;
    if (v.empty()) return std::nullopt;
    while (true) {
        const auto comma = v.find(',');
        const std::string_view w = v.substr(0, comma);
        bool* flag = iequals(w, "SUCCESS") ? &n.success
                     : iequals(w, "FAILURE") ? &n.failure
                     : iequals(w, "DELAY")   ? &n.delay
                                             : nullptr;
        if (!flag || *flag) return std::nullopt;
        *flag = true;
        if (comma == std::string_view::npos) return n;
        v.remove_prefix(comma + 1);
    }
}

// addr-type is an atom (RFC 3461 4.2, RFC 5321 atext).
bool valid_atom(std::string_view s) {
    if (s.empty()) return false;
    for (unsigned char c : s)
        if (!std::isalnum(c) && std::string_view("!#$%&'*+-/=?^_`{|}~").find(static_cast<char>(c)) ==
                                    std::string_view::npos)
            return false;
    return true;
}

} // namespace

bool valid_xtext(std::string_view s) {
    for (std::size_t i = 0; i < s.size(); ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '+') {
            if (i + 2 >= s.size() || !is_upper_hex(s[i + 1]) || !is_upper_hex(s[i + 2]))
                return false;
            i += 2;
        } else if (c < '!' || c > '~' || c == '=') {
            return false;
        }
    }
    return true;
}

std::string xtext_decode(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    for (std::size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '+' && i + 2 < s.size() && is_upper_hex(s[i + 1]) && is_upper_hex(s[i + 2])) {
            out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
            i += 2;
        } else {
            out += s[i];
        }
    }
    return out;
}

std::string xtext_encode(std::string_view s) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    out.reserve(s.size());
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if (c < '!' || c > '~' || c == '+' || c == '=') {
            out += '+';
            out += hex[c >> 4];
            out += hex[c & 15];
        } else {
            out += ch;
        }
    }
    return out;
}

std::optional<std::string_view> param(std::string_view params, std::string_view keyword) {
    std::optional<std::string_view> found;
    each_param(params, [&](std::string_view kv) {
        if (!found && iequals(key_of(kv), keyword)) found = value_of(kv).value_or(std::string_view());
    });
    return found;
}

bool is_rcpt_param(std::string_view kv) {
    return iequals(key_of(kv), "NOTIFY") || iequals(key_of(kv), "ORCPT");
}

bool is_mail_param(std::string_view kv) {
    return iequals(key_of(kv), "RET") || iequals(key_of(kv), "ENVID");
}

std::string check(std::string_view kv) {
    const std::string_view key = key_of(kv);
    const auto v = value_of(kv);
    if (iequals(key, "NOTIFY")) {
        if (!v || !parse_notify(*v)) return "501 5.5.4 Bad NOTIFY parameter syntax";
    } else if (iequals(key, "ORCPT")) {
        const auto semi = v ? v->find(';') : std::string_view::npos;
        if (semi == std::string_view::npos || v->size() > max_orcpt ||
            !valid_atom(v->substr(0, semi)) || semi + 1 == v->size() ||
            !valid_xtext(v->substr(semi + 1)))
            return "501 5.5.4 Bad ORCPT parameter syntax";
    } else if (iequals(key, "RET")) {
        if (!v || (!iequals(*v, "FULL") && !iequals(*v, "HDRS")))
            return "501 5.5.4 Bad RET parameter syntax";
    } else if (iequals(key, "ENVID")) {
        if (!v || v->empty() || v->size() > max_envid || !valid_xtext(*v))
            return "501 5.5.4 Bad ENVID parameter syntax";
    }
    return {};
}

std::string unsupported_option(std::string_view kv) {
    return "555 5.5.4 Unsupported option: " + smx::smtp::printable(kv);
}

std::string check_params(std::string_view params, bool rcpt) {
    std::string err;
    std::vector<std::string_view> seen;
    each_param(params, [&](std::string_view kv) {
        if (!err.empty()) return;
        const bool ours = rcpt ? is_rcpt_param(kv) : is_mail_param(kv);
        if (!ours) {
            if (rcpt) err = unsupported_option(kv);
            return;
        }
        const std::string_view key = key_of(kv);
        for (auto k : seen)
            if (iequals(k, key)) err = "501 5.5.4 Duplicate " + std::string(key) + " parameter";
        seen.push_back(key);
        if (err.empty()) err = check(kv);
    });
    return err;
}

Notify notify(std::string_view rcpt_params) {
    const auto v = param(rcpt_params, "NOTIFY");
    if (!v) return {};
    // SMTPS refused bad syntax; anything else (an old record) is the default.
    return parse_notify(*v).value_or(Notify{});
}

bool ret_hdrs(std::string_view mail_params) {
    const auto v = param(mail_params, "RET");
    return v && iequals(*v, "HDRS");
}

bool ret_full(std::string_view mail_params) {
    const auto v = param(mail_params, "RET");
    return v && iequals(*v, "FULL");
}

std::string pass_on_mail(std::string_view mail_params) {
    std::string out;
    each_param(mail_params, [&](std::string_view kv) {
        if (is_mail_param(kv) && check(kv).empty()) (out += ' ') += kv;
    });
    return out;
}

std::string pass_on_rcpt(std::string_view rcpt_params) {
    std::string out;
    each_param(rcpt_params, [&](std::string_view kv) {
        if (is_rcpt_param(kv) && check(kv).empty()) (out += ' ') += kv;
    });
    return out;
}

} // namespace smx::dsn
