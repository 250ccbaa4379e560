#include "perf/message.hpp"

#include "perf/common.hpp"

#include <cmath>
#include <stdexcept>

namespace smx::perf {

SizeSpec::SizeSpec(const std::string& spec) {
    const auto colon = spec.find(':');
    if (colon != std::string::npos) {
        range_ = true;
        list_ = {parse_size(spec.substr(0, colon)), parse_size(spec.substr(colon + 1))};
        if (list_[0] == 0 || list_[0] > list_[1])
            throw std::invalid_argument("size range must be MIN:MAX with 0 < MIN <= MAX");
        return;
    }
    std::size_t start = 0;
    for (;;) {
        const auto comma = spec.find(',', start);
        list_.push_back(parse_size(spec.substr(start, comma - start)));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
}

std::size_t SizeSpec::size_for(std::size_t index) const {
    if (!range_) return list_[index % list_.size()];
    // Log-uniform so that a 100:1M mix has as many small messages as
    // large ones per decade, like real mail; the hash keeps it reproducible.
    const double u = static_cast<double>(fnv1a(std::to_string(index)) % 1000000) / 1e6;
    const double lo = std::log(static_cast<double>(list_[0]));
    const double hi = std::log(static_cast<double>(list_[1]));
    return static_cast<std::size_t>(std::exp(lo + u * (hi - lo)));
}

std::size_t SizeSpec::max() const {
    std::size_t m = 0;
    for (auto s : list_) m = s > m ? s : m;
    return m;
}

Envelope envelope_of(std::size_t index, const std::string& from_domain,
                     const std::string& rcpt_domain, long recipients) {
    Envelope e;
    e.sender = "sender@" + from_domain;
    const std::string id = std::to_string(index);
    for (long j = 0; j < recipients; ++j)
        e.recipients.push_back("u" + id + "." + std::to_string(j) + "@" + rcpt_domain);
    return e;
}

namespace {
// The message's header and body; `stuffing` goes before a body line that
// starts with '.' (the dot of SMTP's dot-stuffing, or nothing).
void compose(std::size_t index, std::size_t size, const Envelope& env, std::string_view stuffing,
             std::string& m) {
    const std::string id = std::to_string(index);
    m.clear();
    m.reserve(size + 64);
    m += "From: <" + env.sender + ">\r\n";
    m += "To: <" + (env.recipients.empty() ? std::string() : env.recipients[0]) + ">\r\n";
    m += "Subject: smx-source message " + id + "\r\n";
    m += "Message-ID: <" + id + ".smx-source@perf.invalid>\r\n";
    m += "\r\n";
    std::size_t plain = m.size();  // unstuffed bytes so far
    static constexpr std::string_view dot_line = ".dot-stuffed line\r\n";
    if (plain + dot_line.size() <= size) {
        m += stuffing;  // not counted in the unstuffed size
        m += dot_line;
        plain += dot_line.size();
    }
    static constexpr std::string_view alphabet = "abcdefghijklmnopqrstuvwxyz0123456789";
    std::size_t rem = size > plain ? size - plain : 0;
    std::size_t line = index;
    while (rem >= 3) {
        // Full 78-character lines, then one last line that lands on `size`.
        const std::size_t len = rem > 82 ? 78 : rem - 2;
        for (std::size_t i = 0; i < len; ++i) m += alphabet[(line + i) % alphabet.size()];
        m += "\r\n";
        rem -= len + 2;
        ++line;
    }
}
} // namespace

void wire_message(std::size_t index, std::size_t size, const Envelope& env, std::string& m) {
    compose(index, size, env, ".", m);
    m += ".\r\n";
}

void plain_message(std::size_t index, std::size_t size, const Envelope& env, std::string& m) {
    compose(index, size, env, "", m);
}

} // namespace smx::perf
