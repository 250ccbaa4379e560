#include "libsm/smtp_stream.hpp"

#include "libsm/await.hpp"
#include "libsm/tls.hpp"

namespace smx::smtp {
namespace {

// Cancels the socket's I/O at `timeout`, which ends a TLS operation under
// way. Its state is shared with the timer's handler, which may run after
// the operation has ended (and must then leave the socket alone).
class Deadline {
public:
    Deadline(asio::ip::tcp::socket& s, std::chrono::steady_clock::duration timeout)
        : state_(std::make_shared<State>()), timer_(s.get_executor(), timeout) {
        timer_.async_wait([st = state_, s = &s](const boost::system::error_code& ec) {
            if (ec || st->done) return;
            st->fired = true;
            boost::system::error_code ignored;
            s->cancel(ignored);
        });
    }
    ~Deadline() {
        state_->done = true;
        timer_.cancel();
    }
    bool fired() const { return state_->fired; }

private:
    struct State {
        bool done = false, fired = false;
    };
    std::shared_ptr<State> state_;
    asio::steady_timer timer_;
};

} // namespace

asio::awaitable<std::string> Stream::start_tls(asio::ssl::context& ctx,
                                               asio::ssl::stream_base::handshake_type type,
                                               std::chrono::steady_clock::duration timeout,
                                               const std::string& peer, bool verify,
                                               const std::function<void(SSL*)>& prepare) {
    tls_ = std::make_unique<asio::ssl::stream<asio::ip::tcp::socket&>>(sock_, ctx);
    boost::system::error_code not_ip;
    asio::ip::make_address(peer, not_ip);
    if (!peer.empty() && not_ip) SSL_set_tlsext_host_name(tls_->native_handle(), peer.c_str());
    if (verify) {
        tls_->set_verify_mode(asio::ssl::verify_peer);
        tls_->set_verify_callback(asio::ssl::host_name_verification(peer));
    }
    if (prepare) prepare(tls_->native_handle());
    Deadline deadline(sock_, timeout);
    auto [ec] = co_await tls_->async_handshake(type, smx::await_tuple);
    if (deadline.fired()) co_return "timed out";
    if (ec) co_return tls::reason(ec);
    co_return std::string();
}

asio::awaitable<void> Stream::close_tls(std::chrono::steady_clock::duration timeout) {
    if (!tls_) co_return;
    Deadline deadline(sock_, timeout);
    // An error (the peer closed first, the deadline) changes nothing: ours
    // went out first, and the connection closes either way.
    auto [ec] = co_await tls_->async_shutdown(smx::await_tuple);
    (void)ec;
}

} // namespace smx::smtp
