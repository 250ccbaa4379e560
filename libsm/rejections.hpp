// Why SMTPS refused a connection, a command or a message: counted by each
// SMTPS event loop, reported to QMGR with its load (SMTPS_LOAD), summed
// there for `smx stats` and smx_smtp_rejections_total{class,reason}
// (docs/operation.md, Metrics). A fixed set, so the label values are few.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace smx {

enum class Rejection : std::uint32_t {
    relay_denied,          // 554 5.7.1 (RCPT to a domain not relayed for this client)
    message_too_big,       // 552 5.3.4 (SIZE= or the content)
    too_many_recipients,   // 452 4.5.3
    too_many_connections,  // 421 (max_connections; max_connections_per_client, counted by anvil)
    too_many_errors,       // 421 4.7.0 (max_errors)
    insufficient_storage,  // 452 4.3.1 (min_free_space, a full disk)
    queue_unavailable,     // 451 4.3.0 (QMGR down or not answering, a write error)
    queue_refused,         // QMGR refused the transaction
    bare_line_end,         // 550 5.6.11 (bare LF or CR in the content)
    too_many_hops,         // 554 5.4.6
    tls_required,          // 530 5.7.0
    bad_command,           // 500, 502 (unknown, too long, not offered)
    bad_syntax,            // 501, 553, 555 (arguments, addresses, parameters)
    bad_sequence,          // 503, 554 5.5.1 (commands out of order)
    timeout,               // 421 4.4.2
    dnsbl,                 // 550 5.7.1 (dnsbl.sites: the client is listed)
    pregreet,              // 521 5.5.1 (the client talked before the greeting)
    unknown_client,        // 450 4.7.25, 550 5.7.25 (no confirmed client name)
    connection_rate,       // 421 4.7.0 (anvil.connection_rate_limit)
    message_rate,          // 450 4.7.1 (anvil.message_rate_limit)
    recipient_rate,        // 450 4.7.1 (anvil.recipient_rate_limit)
    access_denied,         // an access table's REJECT, DEFER, DEFER_IF_* or NNN reply
    unknown_recipient,     // 550 5.1.1 (not in policy.relay_recipient_maps)
    policy_unavailable,    // 451 4.3.0 (a table lookup failed), 451 4.3.5 (a bad table entry or alias), 451 4.6.0 (alias expansion)
    header_check,          // a policy.header_checks REJECT (550 5.7.1 at the end of data)
    body_check,            // a policy.body_checks REJECT
    policy_service,        // a policy service's REJECT, DEFER, DEFER_IF_PERMIT or NNN answer
    policy_service_failure,  // policy_service_default_action: no service answered
    milter,                // a milter's reject, tempfail or reply code, or its default action when it failed
};
inline constexpr std::size_t rejection_reasons = 29;

// The label value: "relay_denied".
std::string_view rejection_name(Rejection r);

// Counts by reason and reply class (4xx, 5xx).
class RejectionCounts {
public:
    struct Entry {
        Rejection reason;
        unsigned reply_class;  // 4 or 5
        std::uint64_t n;
        bool operator==(const Entry&) const = default;
    };

    // A refusal with reply code (a code outside 400-599 is counted as 5xx).
    void add(Rejection r, unsigned code) { ++n_[static_cast<std::size_t>(r)][code / 100 == 4 ? 0 : 1]; }
    void add(const Entry& e);
    // The counts that are not zero, in reason order, 4xx before 5xx.
    std::vector<Entry> entries() const;
    // entries(), and every count back to zero.
    std::vector<Entry> take();

private:
    std::array<std::array<std::uint64_t, 2>, rejection_reasons> n_{};
};

} // namespace smx
