#include "libsm/rejections.hpp"

#include "libsm/panic.hpp"

#include <string>

namespace smx {

std::string_view rejection_name(Rejection r) {
    static constexpr std::array<std::string_view, rejection_reasons> names{
        "relay_denied",         "message_too_big",   "too_many_recipients", "too_many_connections",
        "too_many_errors",      "insufficient_storage", "queue_unavailable", "queue_refused",
        "bare_line_end",        "too_many_hops",     "tls_required",        "bad_command",
        "bad_syntax",           "bad_sequence",      "timeout",
        "dnsbl",                "pregreet",          "unknown_client",
        "connection_rate",      "message_rate",      "recipient_rate",
        "access_denied",        "unknown_recipient", "policy_unavailable",
        "header_check",         "body_check",        "policy_service",
        "policy_service_failure", "milter"};
    const auto i = static_cast<std::size_t>(r);
    if (i >= names.size()) panic("rejection_name: reason " + std::to_string(i));
    return names[i];
}

void RejectionCounts::add(const Entry& e) {
    const auto i = static_cast<std::size_t>(e.reason);
    if (i >= rejection_reasons || (e.reply_class != 4 && e.reply_class != 5))
        panic("RejectionCounts::add: reason " + std::to_string(i) + " class " +
              std::to_string(e.reply_class));
    n_[i][e.reply_class - 4] += e.n;
}

std::vector<RejectionCounts::Entry> RejectionCounts::entries() const {
    std::vector<Entry> out;
    for (std::size_t i = 0; i < rejection_reasons; ++i)
        for (unsigned c = 0; c < 2; ++c)
            if (n_[i][c]) out.push_back({static_cast<Rejection>(i), 4 + c, n_[i][c]});
    return out;
}

std::vector<RejectionCounts::Entry> RejectionCounts::take() {
    auto out = entries();
    n_ = {};
    return out;
}

} // namespace smx
