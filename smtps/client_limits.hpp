// The per-client limits of one SMTP session, as postfix's smtpd applies
// anvil's counts: server.max_connections_per_client and [anvil]'s rates.
// The counts are QMGR's (qmgr/anvil.hpp), one table for every event loop
// and process; a session asks over its loop's QMGR link when the
// connection begins, at each MAIL and at a RCPT that no MAIL granted
// ahead, and compares the answers with the limits of the config it
// started with. A MAIL is answered together with one RCPT counted ahead
// (while under the recipient limit), so that a message of one recipient
// costs one round trip, not two; a granted RCPT the transaction does not
// use is given back.
//
// Exempt clients (anvil.exceptions, relay_networks unless
// anvil.exempt_relay_networks is false) and limits of 0 cost nothing. When
// QMGR does not answer within anvil_timeout (it is stuck; a QMGR that is
// gone ends the smx-smtps process, which starts again with it), the
// session goes on without the limits and a warning is logged, as postfix's
// smtpd does when anvil is unavailable.
#pragma once

#include "libsm/config.hpp"
#include "libsm/rejections.hpp"
#include "smtps/qmgr_client.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <optional>
#include <string>

namespace smx::smtps {

inline constexpr auto anvil_timeout = std::chrono::seconds(5);

// What the anvil counts a client by: an IPv4 address as it is, an IPv6
// address by its network of ipv6_prefix bits ("2001:db8:1:2::/64").
std::string anvil_key(const std::string& ip, unsigned ipv6_prefix);

class ClientLimits {
public:
    // A limit was reached: the refusal's reason and reply.
    struct Hit {
        smx::Rejection why;
        std::string reply;
    };

    // client: the name the log gives the client ("unknown[ip]"), read when
    // a limit is hit; it must outlive this.
    ClientLimits(QmgrClient& qmgr, const smx::Config& cfg, const std::string& ip, bool trusted,
                 const std::string& client);

    // The connection begins: a 421 when it is one too many.
    asio::awaitable<std::optional<Hit>> connect();
    // An acceptable MAIL: a 450 when it is one too many. Only when
    // asks_at_mail(); otherwise nothing to ask.
    bool asks_at_mail() const { return counted_ && (mail_limit_ || rcpt_limit_); }
    asio::awaitable<std::optional<Hit>> mail();
    // Before a RCPT of a transaction: asks for it when no MAIL granted one.
    bool asks_at_rcpt() const { return counted_ && rcpt_limit_ && grant_ == Grant::none; }
    asio::awaitable<void> ask_rcpt();
    // A RCPT reaches the limit check: a 450 when it is one too many.
    std::optional<Hit> take_rcpt();
    // The transaction is over: a RCPT counted ahead and not used goes back.
    void transaction_ended();
    // The session is over: its connection is no longer counted.
    void session_ended();

private:
    // What the anvil holds for the transaction's next RCPT.
    enum class Grant { none, granted, refused, unchecked };

    asio::awaitable<std::optional<smx::msg::AnvilReply>> ask(smx::msg::AnvilOp op);
    void tell(smx::msg::AnvilOp op);
    Hit hit(smx::Rejection why, std::string_view what, std::uint32_t n, std::string reply) const;

    QmgrClient& qmgr_;
    const std::string ip_;
    const std::string& client_;
    const std::string hostname_;
    const bool counted_;
    const std::string key_;
    const unsigned conn_limit_, conn_rate_limit_, mail_limit_, rcpt_limit_;
    bool connect_sent_ = false;
    Grant grant_ = Grant::none;
    std::uint32_t refused_rate_ = 0;  // the rate of a refused RCPT ask
};

} // namespace smx::smtps
