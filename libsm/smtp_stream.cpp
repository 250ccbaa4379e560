#include "smtp_stream.hpp"

#include "tls.hpp"

namespace sm::smtp {

asio::awaitable<std::string> Stream::start_tls(asio::ssl::context& ctx,
                                               asio::ssl::stream_base::handshake_type type,
                                               std::chrono::steady_clock::duration timeout,
                                               const std::string& peer, bool verify) {
    tls_ = std::make_unique<asio::ssl::stream<asio::ip::tcp::socket&>>(sock_, ctx);
    boost::system::error_code not_ip;
    asio::ip::make_address(peer, not_ip);
    if (!peer.empty() && not_ip) SSL_set_tlsext_host_name(tls_->native_handle(), peer.c_str());
    if (verify) {
        tls_->set_verify_mode(asio::ssl::verify_peer);
        tls_->set_verify_callback(asio::ssl::host_name_verification(peer));
    }
    // The deadline cancels the socket's I/O, which ends the handshake. Its
    // state is shared with the timer's handler, which may run after the
    // handshake has ended (and must then leave the socket alone).
    struct Deadline {
        bool done = false, fired = false;
    };
    auto d = std::make_shared<Deadline>();
    asio::steady_timer timer(sock_.get_executor(), timeout);
    timer.async_wait([d, s = &sock_](const boost::system::error_code& ec) {
        if (ec || d->done) return;
        d->fired = true;
        boost::system::error_code ignored;
        s->cancel(ignored);
    });
    auto [ec] = co_await tls_->async_handshake(type, asio::as_tuple(asio::use_awaitable));
    d->done = true;
    timer.cancel();
    if (d->fired) co_return "timed out";
    if (ec) co_return tls::reason(ec);
    co_return std::string();
}

} // namespace sm::smtp
