// Client TLS session resumption: one SSL_SESSION per next hop address and
// TLS level, offered on the next connection there (an abbreviated
// handshake). TLS 1.3 servers send their tickets after the handshake, with
// the first data, so sessions arrive through OpenSSL's new-session callback
// whenever they come, not when the handshake ends.
#pragma once

#include <boost/asio/ssl.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>

namespace smx::smtpc {

class TlsSessions {
public:
    // Installs the callback on ctx (SMTPC's client context); at most
    // max_entries next hops are remembered, the least recently stored
    // dropped first.
    TlsSessions(boost::asio::ssl::context& ctx, std::size_t max_entries);
    ~TlsSessions();
    TlsSessions(const TlsSessions&) = delete;
    TlsSessions& operator=(const TlsSessions&) = delete;

    // Before the handshake of ssl: offers the session kept under key, and
    // files the sessions this connection receives under key. key must name
    // the peer and the TLS level (a session verified at one level must not
    // skip verification at another).
    void prepare(SSL* ssl, const std::string& key);
    // The handshake under key failed: its session is not offered again.
    void forget(const std::string& key);
    std::size_t size() const { return sessions_.size(); }

private:
    static int on_new_session(SSL* ssl, SSL_SESSION* s);
    void store(const std::string& key, SSL_SESSION* s);

    struct Entry {
        SSL_SESSION* session;
        std::uint64_t stamp;  // when stored, for eviction
    };
    SSL_CTX* ctx_;
    std::size_t max_;
    std::uint64_t next_stamp_ = 0;
    std::unordered_map<std::string, Entry> sessions_;
};

} // namespace smx::smtpc
