#include "perf/common.hpp"

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

namespace {
// std::stol / std::stod with the whole string consumed and a range check;
// the error names the option.
template <class T, class Parse>
T parse_number(const std::string& opt, const std::string& v, T min, T max, Parse parse) {
    std::size_t used = 0;
    T n{};
    try {
        n = parse(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used != v.size() || v.empty() || !(n >= min && n <= max))
        throw std::invalid_argument(opt + ": expected a number in [" + fixed(static_cast<double>(min), 0) +
                                    ", " + fixed(static_cast<double>(max), 0) + "]");
    return n;
}
} // namespace

long Args::number(long min, long max) {
    return parse_number<long>(cur_, value(), min, max,
                              [](const std::string& v, std::size_t* used) { return std::stol(v, used); });
}

double Args::real(double min, double max) {
    return parse_number<double>(cur_, value(), min, max,
                                [](const std::string& v, std::size_t* used) { return std::stod(v, used); });
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
