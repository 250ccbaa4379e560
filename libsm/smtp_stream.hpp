// The byte stream of one SMTP connection: the TCP socket, and after
// STARTTLS a TLS stream over that socket. Reads and writes go to whichever
// is current and complete with the same signature either way, so
// LineReader and write_all work on it unchanged across STARTTLS.
#pragma once

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace smx::smtp {

namespace asio = boost::asio;

class Stream {
public:
    using executor_type = asio::any_io_executor;
    using lowest_layer_type = asio::ip::tcp::socket;

    explicit Stream(asio::ip::tcp::socket s) : sock_(std::move(s)) {}

    executor_type get_executor() { return sock_.get_executor(); }
    asio::ip::tcp::socket& lowest_layer() { return sock_; }
    asio::ip::tcp::socket& socket() { return sock_; }

    bool tls() const { return tls_ != nullptr; }
    // The TLS connection's OpenSSL object; only when tls().
    SSL* ssl() { return tls_->native_handle(); }

    // Starts TLS on the connection: the handshake as `type`, cut at
    // `timeout`. An empty string on success, else the reason (OpenSSL's, or
    // "timed out"); after a failure the connection is good only for closing.
    // A client names the server `peer` (SNI, unless an IP address) and with
    // `verify` requires a certificate that chains to the context's trust
    // anchors and names `peer`. `prepare`, when given, is called with the
    // new OpenSSL object before the handshake (SMTPC offers a session there).
    asio::awaitable<std::string> start_tls(asio::ssl::context& ctx,
                                           asio::ssl::stream_base::handshake_type type,
                                           std::chrono::steady_clock::duration timeout,
                                           const std::string& peer = {}, bool verify = false,
                                           const std::function<void(SSL*)>& prepare = {});

    // Ends TLS (RFC 8446 6.1): sends close_notify, then waits for the
    // peer's until `timeout`. The TCP connection is left to the caller.
    asio::awaitable<void> close_tls(std::chrono::steady_clock::duration timeout);

    // TLS or not is chosen when the operation starts: one return type for
    // every token (a deferred operation's type names its initiation).
    template <class Buffers, class Token>
    auto async_read_some(const Buffers& b, Token&& token) {
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, const Buffers& bufs) {
                if (tls_) tls_->async_read_some(bufs, std::move(handler));
                else sock_.async_read_some(bufs, std::move(handler));
            },
            token, b);
    }
    template <class Buffers, class Token>
    auto async_write_some(const Buffers& b, Token&& token) {
        return asio::async_initiate<Token, void(boost::system::error_code, std::size_t)>(
            [this](auto handler, const Buffers& bufs) {
                if (tls_) tls_->async_write_some(bufs, std::move(handler));
                else sock_.async_write_some(bufs, std::move(handler));
            },
            token, b);
    }

private:
    asio::ip::tcp::socket sock_;
    std::unique_ptr<asio::ssl::stream<asio::ip::tcp::socket&>> tls_;
};

} // namespace smx::smtp
