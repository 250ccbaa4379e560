#include "qmgr/delivery_log.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace smx::qmgr {
namespace {

// Seconds from a to b, none when b is not after a (another clock's stamp).
double seconds(std::uint64_t a_us, std::uint64_t b_us) {
    return b_us > a_us ? static_cast<double>(b_us - a_us) / 1e6 : 0.0;
}

// As postfix writes the parts of delays=: "0", "0.01", "1.2", "35".
std::string short_seconds(double s) {
    std::string t = fmt::format("{:.2f}", s);
    while (t.back() == '0') t.pop_back();
    if (t.back() == '.') t.pop_back();
    return t;
}

// The status code of the outcome: the reply's, else its class's.
std::string dsn_code(const smx::msg::Reply& r, std::string_view status) {
    if (!r.enhanced.empty()) return r.enhanced;
    if (r.code >= 200 && r.code < 600) return std::to_string(r.code / 100) + ".0.0";
    return status == "sent" ? "2.0.0" : status == "bounced" ? "5.0.0" : "4.0.0";
}

} // namespace

void log_status(const Ta& ta, std::uint32_t idx, const Attempt& at, std::string_view status,
                const smx::msg::Reply& reply, std::uint64_t now_us) {
    const std::uint64_t active = std::max(ta.active_us(), ta.arrival_us());
    const std::uint64_t sent = at.sent_us ? std::max(at.sent_us, active) : now_us;
    const double c = at.sent_us ? std::min(static_cast<double>(at.setup_us) / 1e6,
                                           seconds(sent, now_us))
                                : 0.0;
    const double d = at.sent_us ? seconds(sent, now_us) - c : 0.0;
    spdlog::info("{}: to=<{}>, relay={}, delay={:.2f}, delays={}/{}/{}/{}, dsn={}, status={} ({})",
                 ta.id, ta.rcpt(idx).addr(), at.relay.empty() ? "none" : at.relay,
                 seconds(ta.arrival_us(), now_us), short_seconds(seconds(ta.arrival_us(), active)),
                 short_seconds(seconds(active, sent)), short_seconds(c), short_seconds(d),
                 dsn_code(reply, status), status, smx::msg::to_string(reply));
}

} // namespace smx::qmgr
