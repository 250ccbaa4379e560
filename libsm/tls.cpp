#include "libsm/tls.hpp"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <new>

namespace smx::tls {
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

struct BioFree {
    void operator()(BIO* b) const { BIO_free(b); }
};
using Bio = std::unique_ptr<BIO, BioFree>;

// A read-only BIO over PEM bytes (at most max_size(Secret): fits an int).
Bio memory_bio(const std::string& pem) {
    Bio b(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    if (!b) throw std::bad_alloc();
    return b;
}

// An encrypted key fails instead of asking for a passphrase on the terminal.
int no_passphrase(char*, int, int, void*) { return -1; }

// True when reading PEM objects stopped at the end of the data, not at a
// broken one; clears that last error.
bool at_end_of_pem() {
    const unsigned long e = ERR_peek_last_error();
    if (ERR_GET_LIB(e) != ERR_LIB_PEM || ERR_GET_REASON(e) != PEM_R_NO_START_LINE) return false;
    ERR_clear_error();
    return true;
}

// What SSL_CTX_use_certificate_chain_file does with a file: the first
// certificate is the server's, the rest its chain.
void use_chain(SSL_CTX* c, const std::string& pem, const std::string& path) {
    const char* key = key_of(Secret::tls_cert);
    Bio bio = memory_bio(pem);
    X509* leaf = PEM_read_bio_X509_AUX(bio.get(), nullptr, no_passphrase, nullptr);
    if (!leaf) throw ConfigError(key, path + ": no certificate: " + openssl_errors());
    const int used = SSL_CTX_use_certificate(c, leaf);
    X509_free(leaf);
    if (used != 1) throw ConfigError(key, path + ": " + openssl_errors());
    while (X509* ca = PEM_read_bio_X509(bio.get(), nullptr, no_passphrase, nullptr)) {
        if (SSL_CTX_add0_chain_cert(c, ca) != 1) {
            X509_free(ca);
            throw ConfigError(key, path + ": " + openssl_errors());
        }
    }
    if (!at_end_of_pem()) throw ConfigError(key, path + ": " + openssl_errors());
}

void use_key(SSL_CTX* c, const std::string& pem, const ServerConfig& cfg) {
    Bio bio = memory_bio(pem);
    EVP_PKEY* k = PEM_read_bio_PrivateKey(bio.get(), nullptr, no_passphrase, nullptr);
    const bool parsed = k != nullptr;
    // Using the key checks it against the certificate already in use.
    const bool used = parsed && SSL_CTX_use_PrivateKey(c, k) == 1 &&
                      SSL_CTX_check_private_key(c) == 1;
    EVP_PKEY_free(k);
    if (used) return;
    const bool mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
    throw ConfigError(key_of(Secret::tls_key),
                      cfg.tls_key +
                          (mismatch ? " does not match the certificate in " + cfg.tls_cert
                                    : std::string(parsed ? "" : ": no private key")) +
                          ": " + openssl_errors());
}

// What SSL_CTX_load_verify_locations does with a file: every certificate
// (and CRL) in it becomes a trust anchor.
void trust(SSL_CTX* c, const std::string& pem, const std::string& path) {
    const char* key = key_of(Secret::tls_ca_file);
    Bio bio = memory_bio(pem);
    STACK_OF(X509_INFO)* infos = PEM_X509_INFO_read_bio(bio.get(), nullptr, no_passphrase, nullptr);
    if (!infos) throw ConfigError(key, path + ": " + openssl_errors());
    X509_STORE* store = SSL_CTX_get_cert_store(c);
    int certs = 0;
    bool added = true;
    for (int i = 0; i < sk_X509_INFO_num(infos); ++i) {
        const X509_INFO* info = sk_X509_INFO_value(infos, i);
        if (info->x509) {
            added = added && X509_STORE_add_cert(store, info->x509) == 1;
            ++certs;
        }
        if (info->crl) added = added && X509_STORE_add_crl(store, info->crl) == 1;
    }
    sk_X509_INFO_pop_free(infos, X509_INFO_free);
    if (!added) throw ConfigError(key, path + ": " + openssl_errors());
    if (certs == 0) throw ConfigError(key, path + ": no certificate in it");
}

} // namespace

std::unique_ptr<ssl::context> server_context(const ServerConfig& cfg, const Secrets& secrets) {
    const std::string& chain = secrets.at(Secret::tls_cert);
    const std::string& key = secrets.at(Secret::tls_key);
    ERR_clear_error();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_server);
    SSL_CTX* c = ctx->native_handle();
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (SSL_CTX_set_cipher_list(c, tls12_ciphers) != 1)
        throw ConfigError("server.tls_cert", "cipher list: " + openssl_errors());
    use_chain(c, chain, cfg.tls_cert);
    use_key(c, key, cfg);
    // Resumption: tickets (OpenSSL's default, keys made per process) and a
    // server-side session cache for clients without ticket support.
    static constexpr unsigned char sid_ctx[] = "smx-smtps";
    SSL_CTX_set_session_id_context(c, sid_ctx, sizeof sid_ctx - 1);
    SSL_CTX_set_session_cache_mode(c, SSL_SESS_CACHE_SERVER);
    return ctx;
}

std::unique_ptr<ssl::context> client_context(const ClientConfig& cfg, const Secrets& secrets) {
    ERR_clear_error();
    auto ctx = std::make_unique<ssl::context>(ssl::context::tls_client);
    SSL_CTX* c = ctx->native_handle();
    SSL_CTX_set_min_proto_version(c, TLS1_2_VERSION);
    SSL_CTX_set_options(c, SSL_OP_NO_COMPRESSION | SSL_OP_NO_RENEGOTIATION);
    if (cfg.tls_ca_file.empty()) SSL_CTX_set_default_verify_paths(c);
    else trust(c, secrets.at(Secret::tls_ca_file), cfg.tls_ca_file);
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

} // namespace smx::tls
