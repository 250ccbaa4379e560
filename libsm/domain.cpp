#include "libsm/domain.hpp"

namespace smx {

std::string lower(std::string_view s) {
    std::string out(s);
    for (char& c : out) c = lower(c);
    return out;
}

std::string upper(std::string_view s) {
    std::string out(s);
    for (char& c : out)
        if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    return out;
}

bool iequals(std::string_view a, std::string_view b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i)
        if (lower(a[i]) != lower(b[i])) return false;
    return true;
}

std::string_view domain_part(std::string_view addr) {
    const auto at = addr.rfind('@');
    return at == std::string_view::npos ? std::string_view{} : addr.substr(at + 1);
}

std::string domain_of(std::string_view addr) { return lower(domain_part(addr)); }

bool istarts_with(std::string_view s, std::string_view prefix) {
    return s.size() >= prefix.size() && iequals(s.substr(0, prefix.size()), prefix);
}

} // namespace smx
