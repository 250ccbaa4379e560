// The TLS contexts from PEM bytes in memory (what smx run passes): a chain
// and key for the server, a CA bundle for the client, checked by a real
// handshake between the two over a BIO pair. Certificates are made here.
#include "libsm/tls.hpp"

#include "libsm/config.hpp"

#include <openssl/bio.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include <catch2/catch.hpp>

#include <functional>
#include <memory>

using namespace smx;

namespace {

struct X509Free {
    void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
    void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};

// An EC P-256 certificate for cn, signed by issuer (self-signed without one).
struct Cert {
    std::unique_ptr<X509, X509Free> x509;
    std::unique_ptr<EVP_PKEY, KeyFree> key;

    Cert(const std::string& cn, const Cert* issuer, bool ca) : key(EVP_EC_gen("P-256")) {
        static long serial = 1;
        REQUIRE(key);
        x509.reset(X509_new());
        X509* x = x509.get();
        X509_set_version(x, 2);
        ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
        X509_gmtime_adj(X509_getm_notBefore(x), -60);
        X509_gmtime_adj(X509_getm_notAfter(x), 86400);
        X509_set_pubkey(x, key.get());
        X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
                                   reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
        const Cert& signer = issuer ? *issuer : *this;
        X509_set_issuer_name(x, X509_get_subject_name(signer.x509.get()));
        X509V3_CTX v3;
        X509V3_set_ctx(&v3, signer.x509.get(), x, nullptr, nullptr, 0);
        X509_EXTENSION* bc = X509V3_EXT_conf_nid(nullptr, &v3, NID_basic_constraints,
                                                 ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
        REQUIRE(bc);
        X509_add_ext(x, bc, -1);
        X509_EXTENSION_free(bc);
        REQUIRE(X509_sign(x, signer.key.get(), EVP_sha256()) > 0);
    }

    std::string cert_pem() const {
        BIO* b = BIO_new(BIO_s_mem());
        PEM_write_bio_X509(b, x509.get());
        return drain(b);
    }
    // With a passphrase: encrypted.
    std::string key_pem(const char* passphrase = nullptr) const {
        BIO* b = BIO_new(BIO_s_mem());
        PEM_write_bio_PrivateKey(b, key.get(), passphrase ? EVP_aes_128_cbc() : nullptr,
                                 nullptr, 0, nullptr, const_cast<char*>(passphrase));
        return drain(b);
    }

private:
    static std::string drain(BIO* b) {
        char* data = nullptr;
        const long n = BIO_get_mem_data(b, &data);
        std::string out(data, static_cast<std::size_t>(n));
        BIO_free(b);
        return out;
    }
};

ServerConfig server_cfg() {
    ServerConfig cfg;
    cfg.tls_cert = "/etc/smx/chain.pem";
    cfg.tls_key = "/etc/smx/key.pem";
    return cfg;
}

Secrets server_secrets(const std::string& chain, const std::string& key) {
    Secrets s;
    s.set(Secret::tls_cert, chain);
    s.set(Secret::tls_key, key);
    return s;
}

std::unique_ptr<boost::asio::ssl::context> client_trusting(const std::string& ca_pem) {
    ClientConfig cfg;
    cfg.tls_ca_file = "/etc/smx/ca.pem";
    Secrets s;
    s.set(Secret::tls_ca_file, ca_pem);
    return tls::client_context(cfg, s);
}

// A handshake between the two contexts in memory; the client's verify
// result (X509_V_OK when the server's chain leads to a trusted root).
long handshake(SSL_CTX* server, SSL_CTX* client) {
    SSL* s = SSL_new(server);
    SSL* c = SSL_new(client);
    BIO *sb = nullptr, *cb = nullptr;
    REQUIRE(BIO_new_bio_pair(&sb, 0, &cb, 0) == 1);
    SSL_set_bio(s, sb, sb);
    SSL_set_bio(c, cb, cb);
    SSL_set_accept_state(s);
    SSL_set_connect_state(c);
    // Verify, but finish the handshake either way, so that the result is seen.
    SSL_set_verify(c, SSL_VERIFY_PEER, [](int, X509_STORE_CTX*) { return 1; });
    bool done = false;
    for (int i = 0; i < 20 && !done; ++i) {
        const int rc = SSL_do_handshake(c);
        const int rs = SSL_do_handshake(s);
        done = rc == 1 && rs == 1;
    }
    REQUIRE(done);
    const long result = SSL_get_verify_result(c);
    SSL_free(s);
    SSL_free(c);
    return result;
}

std::string error_of(const std::function<void()>& f) {
    try {
        f();
    } catch (const ConfigError& e) {
        return e.what();
    }
    return "<no error>";
}

} // namespace

TEST_CASE("tls: a chain and key from bytes, verified against a CA bundle from bytes") {
    const Cert root("root.test", nullptr, true), other("other-root.test", nullptr, true);
    const Cert inter("intermediate.test", &root, true);
    const Cert leaf("smx.test", &inter, false);
    const auto server = tls::server_context(
        server_cfg(), server_secrets(leaf.cert_pem() + inter.cert_pem(), leaf.key_pem()));
    STACK_OF(X509)* chain = nullptr;
    SSL_CTX_get0_chain_certs(server->native_handle(), &chain);
    REQUIRE(sk_X509_num(chain) == 1);

    // Every certificate of the bundle is a trust anchor.
    const auto client = client_trusting(other.cert_pem() + root.cert_pem());
    REQUIRE(handshake(server->native_handle(), client->native_handle()) == X509_V_OK);
    // The test can fail: a root not in the bundle, or a chain without its
    // intermediate, does not verify.
    const auto stranger = client_trusting(other.cert_pem());
    REQUIRE(handshake(server->native_handle(), stranger->native_handle()) != X509_V_OK);
    const auto no_chain =
        tls::server_context(server_cfg(), server_secrets(leaf.cert_pem(), leaf.key_pem()));
    REQUIRE(handshake(no_chain->native_handle(), client->native_handle()) != X509_V_OK);
}

TEST_CASE("tls: bad server secrets are config errors naming the key and the file") {
    const Cert a("a.test", nullptr, false), b("b.test", nullptr, false);
    const auto server = [&](const std::string& chain, const std::string& key) {
        return error_of([&] { tls::server_context(server_cfg(), server_secrets(chain, key)); });
    };
    REQUIRE(server(a.cert_pem(), a.key_pem()) == "<no error>");
    REQUIRE(server(a.cert_pem(), b.key_pem())
                .starts_with("server.tls_key: /etc/smx/key.pem does not match the certificate "
                             "in /etc/smx/chain.pem: "));
    REQUIRE(server(a.key_pem(), a.key_pem())
                .starts_with("server.tls_cert: /etc/smx/chain.pem: no certificate: "));
    REQUIRE(server(a.cert_pem(), a.cert_pem())
                .starts_with("server.tls_key: /etc/smx/key.pem: no private key: "));
    REQUIRE(server(a.cert_pem() + "-----BEGIN CERTIFICATE-----\nnot base64\n"
                                  "-----END CERTIFICATE-----\n",
                   a.key_pem())
                .starts_with("server.tls_cert: /etc/smx/chain.pem: "));
    // An encrypted key fails; nobody is asked for its passphrase.
    REQUIRE(server(a.cert_pem(), a.key_pem("secret"))
                .starts_with("server.tls_key: /etc/smx/key.pem: no private key: "));
    REQUIRE(error_of([] { tls::server_context(server_cfg(), Secrets()); }) ==
            "server.tls_cert: not passed by smx run (it reads the file for its children, "
            "which never open it)");
}

TEST_CASE("tls: a CA bundle without a certificate, or a broken one, is a config error") {
    const auto client = [](const std::string& pem) {
        return error_of([&] { client_trusting(pem); });
    };
    REQUIRE(client("") == "client.tls_ca_file: /etc/smx/ca.pem: no certificate in it");
    REQUIRE(client("just text\n") == "client.tls_ca_file: /etc/smx/ca.pem: no certificate in it");
    REQUIRE(client("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
                .starts_with("client.tls_ca_file: /etc/smx/ca.pem: "));
    // No CA file: the system's, and no secret needed.
    REQUIRE(error_of([] { tls::client_context(ClientConfig(), Secrets()); }) == "<no error>");
}
