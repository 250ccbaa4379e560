#include "libsm/address.hpp"

#include "libsm/domain.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <cstdint>
#include <string>

namespace smx {
namespace {

void trim(std::string_view& s) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    while (!s.empty() && s.back() == ' ') s.remove_suffix(1);
}

// utf8: octets of UTF-8 sequences are letters too (RFC 6531 3.3); that the
// sequences are well-formed is checked once, for the whole address.
bool atext(char c, bool utf8) {
    if (utf8 && static_cast<unsigned char>(c) >= 0x80) return true;
    if (c <= ' ' || c >= 127) return false;
    switch (c) {
    case '(': case ')': case '<': case '>': case '[': case ']':
    case '\\': case ',': case ';': case ':': case '@': case '"':
        return false;
    default:
        return true;
    }
}

bool valid_local(std::string_view l, bool utf8) {
    if (l.empty() || l.size() > 64) return false;
    if (l.front() == '"') {
        if (l.size() < 2 || l.back() != '"') return false;
        for (std::size_t i = 1; i + 1 < l.size(); ++i) {
            const char c = l[i];
            if (c == '\\') {
                if (++i + 1 >= l.size()) return false;
                if (l[i] < ' ' || l[i] >= 127) return false;
            } else if (!(utf8 && static_cast<unsigned char>(c) >= 0x80) &&
                       (c < ' ' || c >= 127 || c == '"')) {
                return false;
            }
        }
        return true;
    }
    // Dot-string; consecutive or edge dots occur in real mail and are
    // harmless to relay, so only the character set is enforced.
    for (char c : l)
        if (!atext(c, utf8) && c != '.') return false;
    return true;
}

bool valid_domain(std::string_view d, bool utf8) {
    if (d.empty() || d.size() > 255) return false;
    if (d.front() == '[') {
        // Address literals: [IPv4] or [IPv6:...] only (RFC 5321 4.1.3); a
        // general literal would carry bytes no next hop expects.
        if (d.back() != ']' || d.size() < 3) return false;
        const std::string lit(d.substr(1, d.size() - 2));
        // inet_pton reads up to a NUL: a CR or anything after one would
        // ride along to the next hop unchecked.
        if (lit.find('\0') != std::string::npos) return false;
        unsigned char buf[16];
        if (lit.size() > 5 && iequals(std::string_view(lit).substr(0, 5), "IPv6:"))
            return ::inet_pton(AF_INET6, lit.c_str() + 5, buf) == 1;
        return ::inet_pton(AF_INET, lit.c_str(), buf) == 1;
    }
    std::size_t label = 0;
    for (char c : d) {
        if (c == '.') {
            if (label == 0) return false;
            label = 0;
        } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ||
                   (utf8 && static_cast<unsigned char>(c) >= 0x80)) {
            if (++label > 63) return false;
        } else {
            return false;
        }
    }
    return label > 0;
}

} // namespace

std::optional<PathArg> parse_path(std::string_view arg, std::string_view keyword) {
    if (!istarts_with(arg, keyword)) return std::nullopt;
    arg.remove_prefix(keyword.size());
    while (!arg.empty() && arg.front() == ' ') arg.remove_prefix(1);  // common client bug
    PathArg p;
    if (!arg.empty() && arg.front() == '<') {
        // Find the closing '>' outside a quoted local part.
        bool quoted = false;
        std::size_t i = 1;
        for (; i < arg.size(); ++i) {
            const char c = arg[i];
            if (quoted && c == '\\') ++i;
            else if (c == '"') quoted = !quoted;
            else if (c == '>' && !quoted) break;
        }
        if (i >= arg.size()) return std::nullopt;
        p.addr = arg.substr(1, i - 1);
        arg.remove_prefix(i + 1);
        if (!arg.empty() && arg.front() != ' ') return std::nullopt;
    } else {
        // Without brackets (not RFC, but common): the address is one word.
        const auto sp = arg.find(' ');
        p.addr = arg.substr(0, sp);
        arg.remove_prefix(sp == std::string_view::npos ? arg.size() : sp);
        if (p.addr.empty()) return std::nullopt;
    }
    // A source route "@a,@b:user@c" may be ignored (RFC 5321 4.1.1.3).
    if (!p.addr.empty() && p.addr.front() == '@') {
        const auto colon = p.addr.find(':');
        if (colon == std::string_view::npos) return std::nullopt;
        p.addr.remove_prefix(colon + 1);
    }
    trim(arg);
    p.params = arg;
    return p;
}

bool valid_utf8(std::string_view s) {
    for (std::size_t i = 0; i < s.size();) {
        const auto b = static_cast<unsigned char>(s[i]);
        std::size_t n;
        std::uint32_t cp;
        if (b < 0x80) n = 0, cp = b;
        else if (b >= 0xC2 && b <= 0xDF) n = 1, cp = b & 0x1Fu;
        else if (b >= 0xE0 && b <= 0xEF) n = 2, cp = b & 0x0Fu;
        else if (b >= 0xF0 && b <= 0xF4) n = 3, cp = b & 0x07u;
        else return false;
        if (i + n >= s.size() && n > 0) return false;
        for (std::size_t k = 1; k <= n; ++k) {
            const auto c = static_cast<unsigned char>(s[i + k]);
            if ((c & 0xC0) != 0x80) return false;
            cp = cp << 6 | (c & 0x3Fu);
        }
        // Overlong forms, UTF-16 surrogates and beyond U+10FFFF.
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) ||
            (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
            return false;
        i += n + 1;
    }
    return true;
}

bool valid_address(std::string_view addr, bool allow_empty, bool utf8) {
    if (addr.empty()) return allow_empty;
    if (addr.size() > 254) return false;
    if (utf8 && !valid_utf8(addr)) return false;
    // Legal inside a quoted local part, but it goes between < > in every
    // command SMTPC sends: refused here rather than bounced there.
    if (addr.find_first_of("<>") != std::string_view::npos) return false;
    const auto at = addr.rfind('@');
    if (at == std::string_view::npos) return false;
    return valid_local(addr.substr(0, at), utf8) && valid_domain(addr.substr(at + 1), utf8);
}

std::string address_key(std::string_view addr) {
    const std::string_view domain = domain_part(addr);
    std::string key(addr.substr(0, addr.size() - domain.size()));
    key += lower(domain);
    return key;
}

} // namespace smx
