#include "libsm/limits.hpp"

#include "libsm/listen.hpp"

#include <sys/resource.h>

#include <algorithm>

namespace smx {

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

unsigned sessions_fitting(const ServerConfig& s, unsigned long limit) {
    const unsigned long fixed = fixed_need(s);
    if (limit <= fixed + 2) return 1;
    return static_cast<unsigned>(std::min<unsigned long>((limit - fixed) / 2, ~0u));
}

unsigned fitting_connections(const ServerConfig& s, unsigned long limit, std::string& warning) {
    warning.clear();
    if (descriptors_needed(s, s.max_connections) <= limit) return s.max_connections;
    const unsigned fits = sessions_fitting(s, limit);
    warning = "server.max_connections = " + std::to_string(s.max_connections) + " needs " +
              std::to_string(descriptors_needed(s, s.max_connections)) +
              " file descriptors but the limit (RLIMIT_NOFILE) is " + std::to_string(limit) +
              "; using max_connections = " + std::to_string(fits) +
              " (raise the hard limit, e.g. LimitNOFILE= or ulimit -Hn, to allow more)";
    return fits;
}

ServerConfig process_share(const ServerConfig& s, unsigned processes) {
    ServerConfig out = s;
    auto part = [processes](unsigned v) { return v == 0 ? 0 : (v + processes - 1) / processes; };
    out.max_connections = part(s.max_connections);
    out.max_transactions = part(s.max_transactions);
    return out;
}

unsigned loops_per_process(unsigned threads, unsigned processes) {
    return threads != 0 ? threads : std::max(1u, event_loops(0) / processes);
}

SmtpsLayout smtps_layout(const ServerConfig& s, unsigned long limit, std::string& warning) {
    auto share = [&](unsigned processes) {
        ServerConfig one = process_share(s, processes);
        one.threads = loops_per_process(s.threads, processes);
        return one;
    };
    // With several, a tenth more each: the hash spreads connections evenly
    // but not exactly, and a process refuses a client only when the total
    // is reached or its own descriptors are used up.
    auto fits = [&](unsigned processes) {
        const ServerConfig one = share(processes);
        const unsigned spread = processes == 1 ? 0 : one.max_connections / 10;
        return descriptors_needed(one, one.max_connections + spread) <= limit;
    };
    unsigned p = s.processes;
    if (p == 0)
        for (p = 1; p < max_smtps_processes && !fits(p); ++p) {
        }
    const ServerConfig one = share(p);
    fitting_connections(one, limit, warning);
    if (!warning.empty() && p > 1)
        warning = "each of " + std::to_string(p) + " smx-smtps processes: " + warning;
    return {p, one.threads};
}

} // namespace smx
