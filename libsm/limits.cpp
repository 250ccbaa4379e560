#include "limits.hpp"

#include "listen.hpp"

#include <sys/resource.h>

namespace sm {

namespace {
constexpr unsigned long reserve = 64;

unsigned long fixed_need(const ServerConfig& s) {
    return reserve + event_loops(s.threads) * (5 + s.listen.size());
}
} // namespace

unsigned long raise_nofile() {
    rlimit r{};
    if (::getrlimit(RLIMIT_NOFILE, &r) != 0) return 1024;
    if (r.rlim_cur < r.rlim_max) {
        const rlim_t old = r.rlim_cur;
        r.rlim_cur = r.rlim_max;
        if (::setrlimit(RLIMIT_NOFILE, &r) != 0) r.rlim_cur = old;
    }
    return r.rlim_cur == RLIM_INFINITY ? ~0ul : static_cast<unsigned long>(r.rlim_cur);
}

unsigned long descriptors_needed(const ServerConfig& s, unsigned sessions) {
    return 2ul * sessions + fixed_need(s);
}

unsigned fitting_connections(const ServerConfig& s, unsigned long limit, std::string& warning) {
    warning.clear();
    if (descriptors_needed(s, s.max_connections) <= limit) return s.max_connections;
    const unsigned long fixed = fixed_need(s);
    const unsigned fits = limit > fixed + 2 ? static_cast<unsigned>((limit - fixed) / 2) : 1;
    warning = "server.max_connections = " + std::to_string(s.max_connections) + " needs " +
              std::to_string(descriptors_needed(s, s.max_connections)) +
              " file descriptors but the limit (RLIMIT_NOFILE) is " + std::to_string(limit) +
              "; using max_connections = " + std::to_string(fits) +
              " (raise the hard limit, e.g. LimitNOFILE= or ulimit -Hn, to allow more)";
    return fits;
}

} // namespace sm
