#include "libsm/smtp_io.hpp"

#include <algorithm>

namespace smx::smtp {

bool has_8bit(std::string_view s) {
    return std::any_of(s.begin(), s.end(),
                       [](char c) { return static_cast<unsigned char>(c) >= 0x80; });
}

std::string printable(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x20 || u >= 0x7f) c = c == '\t' ? ' ' : '?';
    }
    return out;
}

std::pair<std::string_view, std::string_view> split_enhanced(std::string_view text) {
    // class.subject.detail: class 2/4/5, subject 1-3 digits, detail 1-3 digits
    std::size_t i = 0;
    auto digits = [&](std::size_t maxn) {
        std::size_t n = 0;
        while (i < text.size() && n < maxn && text[i] >= '0' && text[i] <= '9') ++i, ++n;
        return n > 0;
    };
    if (text.size() < 5 || (text[0] != '2' && text[0] != '4' && text[0] != '5') ||
        text[1] != '.')
        return {{}, text};
    i = 2;
    if (!digits(3) || i >= text.size() || text[i] != '.') return {{}, text};
    ++i;
    if (!digits(3)) return {{}, text};
    if (i < text.size() && text[i] != ' ') return {{}, text};
    const std::string_view code = text.substr(0, i);
    while (i < text.size() && text[i] == ' ') ++i;
    return {code, text.substr(i)};
}

std::string Reply::text() const {
    if (lines.empty()) return {};
    return std::string(split_enhanced(lines[0]).second);
}

std::string Reply::summary() const {
    std::string s = std::to_string(code);
    for (std::size_t i = 0; i < lines.size(); ++i) {
        s += i == 0 ? " " : " / ";
        s += lines[i];
    }
    return s;
}

} // namespace smx::smtp
