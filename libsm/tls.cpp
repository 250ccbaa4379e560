#include "tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace sm::tls {
namespace {

namespace ssl = boost::asio::ssl;

// Mozilla's "intermediate" configuration (version 5.7) for TLS 1.2, without
// the DHE suites (every current client has ECDHE). TLS 1.3 suites are
// OpenSSL's defaults, all of them AEAD.
constexpr const char* tls12_ciphers =
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:"
    "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:"
    "ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305";

// OpenSSL's queued errors as one line, emptying the queue.
std::string openssl_errors() {
    std::string out;
    while (const unsigned long e = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        if (!out.empty()) out += "; ";
        out += buf;
    }
    return out.empty() ? "unknown OpenSSL error" : out;
}

void check_readable(const std::string& key, const std::string& path) {
    std::ifstream f(path);
    if (!f) throw ConfigError(key, "cannot read " + path + ": " + std::strerror(errno));
}

} // namespace

std::unique_ptr<ssl::context> server_context(const ServerConfig& cfg) {
    check_readable("server.tls_cert", cfg.tls_cert);
    check_readable("server.tls_key", cfg.tls_key);
    ERR_clear_error();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* c = ctx->native_handle();
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_set_cipher_list(c, tls12_ciphers) != 1)
        throw ConfigError("server.tls_cert", "cipher list: " + openssl_errors());
    if (SSL_CTX_use_certificate_chain_file(c, cfg.tls_cert.c_str()) != 1)
        throw ConfigError("server.tls_cert", cfg.tls_cert + ": " + openssl_errors());
    // Loading the key checks it against the certificate already loaded.
    if (SSL_CTX_use_PrivateKey_file(c, cfg.tls_key.c_str(), SSL_FILETYPE_PEM) != 1 ||
        SSL_CTX_check_private_key(c) != 1) {
        const bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
        throw ConfigError("server.tls_key",
                          cfg.tls_key +
                              (mismatch ? " does not match the certificate in " + cfg.tls_cert
                                        : std::string()) +
                              ": " + openssl_errors());
    }
    // Resumption: tickets (OpenSSL's default, keys made per process) and a
    // server-side session cache for clients without ticket support.
    static constexpr unsigned char sid_ctx[] = "smx-smtps";
    SSL_CTX_set_session_id_context(c, sid_ctx, sizeof sid_ctx - 1);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_SERVER);
    return ctx;
}

std::unique_ptr<ssl::context> client_context(const ClientConfig& cfg) {
    ERR_clear_error();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX* c = ctx->native_handle();
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (cfg.tls_ca_file.empty()) {
        SSL_CTX_set_default_verify_paths(c);
    } else {
        check_readable("client.tls_ca_file", cfg.tls_ca_file);
        if (SSL_CTX_load_verify_locations(c, cfg.tls_ca_file.c_str(), nullptr) != 1)
            throw ConfigError("client.tls_ca_file", cfg.tls_ca_file + ": " + openssl_errors());
    }
    return ctx;
}

std::string describe(SSL* s) {
    const SSL_CIPHER* c = SSL_get_current_cipher(s);
    int alg_bits = 0;
    const int bits = c ? SSL_CIPHER_get_bits(c, &alg_bits) : 0;
    return std::string(SSL_get_version(s)) + " with cipher " +
           (c ? SSL_CIPHER_get_name(c) : "(none)") + " (" + std::to_string(bits) + "/" +
           std::to_string(alg_bits) + " bits)";
}

std::string reason(const boost::system::error_code& ec) {
    if (ec == ssl::error::stream_truncated) return "connection closed during the handshake";
    return ec.message();
}

} // namespace sm::tls
