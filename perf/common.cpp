#include "common.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <stdexcept>

namespace smx::perf {

bool Args::next() {
    if (i_ >= argv_.size()) return false;
    cur_ = argv_[i_++];
    return true;
}

std::string Args::value() {
    if (i_ >= argv_.size()) throw std::invalid_argument(cur_ + " needs a value");
    return argv_[i_++];
}

long Args::number(long min, long max) {
    const std::string v = value();
    std::size_t used = 0;
    long n = 0;
    try {
        n = std::stol(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || v.empty() || n < min || n > max)
        throw std::invalid_argument(cur_ + ": expected an integer in [" +
                                    std::to_string(min) + ", " + std::to_string(max) + "]");
    return n;
}

double Args::real(double min, double max) {
    const std::string v = value();
    std::size_t used = 0;
    double d = 0;
    try {
        d = std::stod(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || v.empty() || !(d >= min && d <= max))
        throw std::invalid_argument(cur_ + ": expected a number in [" + fixed(min, 0) +
                                    ", " + fixed(max, 0) + "]");
    return d;
}

std::size_t parse_size(std::string_view s) {
    std::size_t mult = 1;
    if (!s.empty()) {
        switch (s.back()) {
        case 'k': case 'K': mult = 1024; break;
        case 'm': case 'M': mult = 1024 * 1024; break;
        default: break;
        }
        if (mult != 1) s.remove_suffix(1);
    }
    std::size_t n = 0;
    if (s.empty() || s.size() > 9) throw std::invalid_argument("bad size");
    for (char c : s) {
        if (c < '0' || c > '9') throw std::invalid_argument("bad size");
        n = n * 10 + static_cast<std::size_t>(c - '0');
    }
    return n * mult;
}

double epoch_seconds() {
    using namespace std::chrono;
    return duration<double>(system_clock::now().time_since_epoch()).count();
}

void raise_fd_limit() {
    rlimit rl{};
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);  // best effort: the old limit still works
    }
}

std::string json_escape(std::string_view s) {
    std::string o;
    o.reserve(s.size() + 2);
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += static_cast<char>(c);
        } else if (c < 0x20) {
            char b[8];
            std::snprintf(b, sizeof b, "\\u%04x", c);
            o += b;
        } else {
            o += static_cast<char>(c);
        }
    }
    return o;
}

std::string fixed(double v, int decimals) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
    return b;
}

std::string json_counts(const std::map<std::string, std::uint64_t>& m) {
    std::string o = "{";
    for (const auto& [k, v] : m) {
        if (o.size() > 1) o += ',';
        o += '"' + json_escape(k) + "\":" + std::to_string(v);
    }
    return o + "}";
}

std::uint64_t fnv1a(std::string_view s) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : s) {
        h ^= c;
        h *= 1099511628211ull;
    }
    return h;
}

} // namespace smx::perf
