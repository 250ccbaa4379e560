#include "libsm/dnsbl_site.hpp"

#include "libsm/config.hpp"
#include "libsm/dns_resolver.hpp"
#include "libsm/domain.hpp"

#include <arpa/inet.h>

#include <cctype>
#include <charconv>

namespace smx {
namespace {

// A decimal number in [lo, hi], all of s.
bool number(std::string_view s, long lo, long hi, long& out) {
    if (s.empty()) return false;
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return ec == std::errc() && p == s.data() + s.size() && out >= lo && out <= hi;
}

// "2", "[2..11]", "[2;3;5..7]".
bool parse_octet(std::string_view s, DnsblSite::Octet& out) {
    if (s.size() >= 2 && s.front() == '[' && s.back() == ']') {
        s = s.substr(1, s.size() - 2);
        while (true) {
            const auto semi = s.find(';');
            const std::string_view item = s.substr(0, semi);
            const auto dots = item.find("..");
            long a = 0, b = 0;
            if (dots == std::string_view::npos) {
                if (!number(item, 0, 255, a)) return false;
                b = a;
            } else if (!number(item.substr(0, dots), 0, 255, a) ||
                       !number(item.substr(dots + 2), 0, 255, b) || b < a) {
                return false;
            }
            out.emplace_back(static_cast<std::uint8_t>(a), static_cast<std::uint8_t>(b));
            if (semi == std::string_view::npos) return true;
            s.remove_prefix(semi + 1);
        }
    }
    long v = 0;
    if (!number(s, 0, 255, v)) return false;
    out.emplace_back(static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v));
    return true;
}

} // namespace

bool DnsblSite::matches(std::uint32_t addr) const {
    if (filter.empty()) return true;
    for (std::size_t i = 0; i < 4; ++i) {
        const auto o = static_cast<std::uint8_t>(addr >> (24 - 8 * i));
        bool in = false;
        for (const auto& [lo, hi] : filter[i]) in = in || (o >= lo && o <= hi);
        if (!in) return false;
    }
    return true;
}

std::string DnsblSite::query_name(const std::string& ip) const {
    std::string q;
    in_addr a4{};
    in6_addr a6{};
    if (::inet_pton(AF_INET, ip.c_str(), &a4) == 1) {
        const auto* b = reinterpret_cast<const unsigned char*>(&a4.s_addr);
        for (int i = 3; i >= 0; --i) q += std::to_string(b[i]) + ".";
    } else if (::inet_pton(AF_INET6, ip.c_str(), &a6) == 1) {
        static constexpr char hex[] = "0123456789abcdef";
        for (int i = 15; i >= 0; --i) {
            q += hex[a6.s6_addr[i] & 0xF];
            q += '.';
            q += hex[a6.s6_addr[i] >> 4];
            q += '.';
        }
    } else {
        return {};
    }
    return q + zone;
}

DnsblSite parse_dnsbl_site(const std::string& key, const std::string& s) {
    DnsblSite site;
    site.text = s;
    const auto bad = [&](const std::string& why) {
        return ConfigError(key, "'" + s + "': " + why + " (zone[=filter][*weight])");
    };
    std::string_view rest(s);
    if (const auto star = rest.rfind('*'); star != std::string_view::npos) {
        long w = 0;
        if (!number(rest.substr(star + 1), -1000000, 1000000, w))
            throw bad("the weight is not a whole number");
        site.weight = static_cast<int>(w);
        rest = rest.substr(0, star);
    }
    if (const auto eq = rest.find('='); eq != std::string_view::npos) {
        const std::string_view f = rest.substr(eq + 1);
        rest = rest.substr(0, eq);
        // Octets end at the dots outside brackets ("127.0.0.[2..4]").
        std::size_t begin = 0;
        int depth = 0;
        for (std::size_t i = 0; i <= f.size(); ++i) {
            if (i < f.size() && f[i] == '[') ++depth;
            if (i < f.size() && f[i] == ']') --depth;
            if (i < f.size() && (f[i] != '.' || depth > 0)) continue;
            DnsblSite::Octet o;
            if (site.filter.size() == 4 || !parse_octet(f.substr(begin, i - begin), o))
                throw bad("the filter is not four octets, each 0..255, [a..b] or [a;b;...]");
            site.filter.push_back(std::move(o));
            begin = i + 1;
        }
        if (site.filter.size() != 4)
            throw bad("the filter is not four octets, each 0..255, [a..b] or [a;b;...]");
    }
    if (!rest.empty() && rest.back() == '.') rest.remove_suffix(1);
    site.zone = lower(std::string(rest));
    if (!dns::valid_hostname(site.zone)) throw bad("the zone is not a domain name");
    return site;
}

} // namespace smx
