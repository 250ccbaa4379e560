// One outbound SMTP connection: connect, greeting, EHLO, then any number of
// mail transactions (with PIPELINING when offered), then QUIT. A session is
// owned by one delivery at a time or sits idle in the connection cache, so
// it has exactly one reader and one writer.
#pragma once

#include "libsm/config.hpp"
#include "libsm/credentials.hpp"
#include "libsm/messages.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/smtp_stream.hpp"
#include "smtpc/body.hpp"
#include "smtpc/nexthop.hpp"
#include "smtpc/tls_sessions.hpp"

#include <boost/asio.hpp>
#include <array>
#include <optional>
#include <string>
#include <vector>

namespace smx::smtpc {

using tcp = asio::ip::tcp;
using Results = std::vector<smx::msg::RcptResult>;

class Session {
public:
    // tls: SMTPC's client context (null: no TLS at all); resume: the TLS
    // sessions to offer and keep (null: every handshake is a full one).
    Session(asio::any_io_executor ex, const smx::ClientConfig& cfg, asio::ssl::context* tls,
            TlsSessions* resume = nullptr);
    Session(const Session&) = delete;
    Session& operator=(const Session&) = delete;

    // Connects, reads the greeting and says EHLO (HELO when EHLO is
    // refused), then STARTTLS and EHLO again as `tls` asks, then AUTH with
    // `auth` when given (only over TLS). nullopt: ready for transactions;
    // else why not.
    asio::awaitable<std::optional<Failure>> open(const Target& t, smx::ClientTls tls,
                                                 const smx::Credentials* auth = nullptr);
    // open() failed in the TLS handshake at level may: the caller connects
    // again without TLS, as postfix does.
    bool tls_fallback() const { return tls_fallback_; }

    enum class Outcome { done, retry };
    // One mail transaction for d. res has one entry per recipient of d with
    // idx set and code 0; every code is filled in. retry: a reused connection
    // broke before this transaction got any reply (the server had closed
    // it); res is untouched and the caller tries another connection.
    asio::awaitable<Outcome> transaction(const smx::msg::Deliver& d, const MessageFile& f,
                                         Results& res);

    // QUIT, wait briefly for the reply, close.
    asio::awaitable<void> quit();
    void close();

    bool usable() const { return open_; }
    // The server sent something nobody asked for yet: the next reply read
    // would be out of step, so such a connection is never reused.
    // has_buffered looks only at what was read already (no system call).
    bool has_unread();
    bool has_buffered();
    // What ended an idle wait (watch_idle).
    enum class IdleEnd { cancelled, closed, data };
    // Calls done once the server sends or closes anything while the
    // session is idle (at once if it already has), or the wait is
    // cancelled (socket().cancel()): a receive that only peeks, asio's
    // speculative try included, so that waiting costs no epoll change.
    // A 421 (the server's idle timeout) counts as closed; other plaintext
    // bytes as data nobody asked for.
    template <class Done>
    void watch_idle(Done done) {
        socket().async_receive(
            asio::buffer(peek_), tcp::socket::message_peek,
            [this, done = std::move(done)](boost::system::error_code ec, std::size_t n) mutable {
                if (ec == asio::error::operation_aborted) return done(IdleEnd::cancelled);
                const bool data = n > 0 && !stream_.tls() &&
                                  std::string_view(peek_.data(), n).substr(0, 3) != "421";
                done(data ? IdleEnd::data : IdleEnd::closed);
            });
    }
    unsigned transactions() const { return transactions_; }
    const std::string& relay() const { return relay_; }
    // Its EHLO offered DSN: NOTIFY, ORCPT, RET and ENVID went on with the mail.
    bool dsn_offered() const { return dsn_offered_; }
    tcp::socket& socket() { return stream_.socket(); }
    asio::steady_timer& idle_timer() { return idle_timer_; }
    // Bumped each time the cache hands the session out, so that stale idle
    // watchers know they lost it.
    std::uint64_t idle_gen = 0;

private:
    asio::awaitable<bool> exchange(const smx::msg::Deliver& d, const MessageFile& f,
                                   Results& res);
    asio::awaitable<bool> send_body(const MessageFile& f);
    // What a reply may be in its place (RFC 5321 4.3.2): `reply` is 2xx, 4xx
    // or 5xx; `data` (the reply to DATA) is 354, 4xx or 5xx. Anything else
    // is a protocol error: the transaction fails for now and the connection
    // is closed. Only a 2xx after the end of data means delivered. `auth`
    // (a step of AUTH) may also be 334.
    enum class Expect { reply, data, auth };
    asio::awaitable<bool> write(std::string_view data, const char* stage);
    asio::awaitable<bool> read(const char* stage, Expect e = Expect::reply);
    asio::awaitable<bool> command(std::string_view data, const char* stage);
    void parse_ehlo();
    // The MAIL parameters passed on from the client's (" KEY=VALUE ...").
    std::string mail_params(std::string_view received) const;
    asio::awaitable<std::optional<Failure>> starttls(const Target& t, smx::ClientTls level);
    asio::awaitable<std::optional<Failure>> authenticate(const smx::Credentials& c);
    // A step of AUTH carrying a secret; cmd_ is wiped after the write.
    asio::awaitable<bool> auth_step(std::string secret_line);

    const smx::ClientConfig& cfg_;
    asio::ssl::context* tls_;
    TlsSessions* resume_;
    smx::smtp::Stream stream_;
    smx::smtp::LineReader<smx::smtp::Stream> reader_;
    asio::steady_timer idle_timer_;
    std::array<char, 3> peek_{};  // what watch_idle peeks at
    std::string relay_;
    bool open_ = false;
    bool pipelining_ = false;
    bool size_offered_ = false;
    bool starttls_offered_ = false;
    bool smtputf8_offered_ = false;
    bool auth_plain_ = false, auth_login_ = false;  // mechanisms in EHLO's AUTH
    bool dsn_offered_ = false;
    bool eightbit_offered_ = false;
    bool tls_fallback_ = false;
    std::uint64_t size_limit_ = 0;  // 0: none announced
    bool needs_rset_ = false;       // the last transaction stopped half-way
    bool replied_ = false;          // this transaction got a reply
    unsigned transactions_ = 0;
    smx::smtp::Reply rep_;           // the last reply read
    Failure fail_;                  // why the connection broke
    // Reused between messages to avoid per-message allocations.
    std::string cmd_, in_, out_;
    std::vector<char> accepted_;
};

// The server's reply as a result: code, enhanced code and text of all lines.
Failure from_reply(const smx::smtp::Reply& r);

} // namespace smx::smtpc
