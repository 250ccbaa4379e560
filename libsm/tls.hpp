// TLS policy shared by SMTPS (STARTTLS server), SMTPC (STARTTLS client) and
// `smx run` and `smx check-config`, which build the contexts once to check
// the secrets they pass: the OpenSSL contexts, made from PEM bytes in memory
// (libsm/secrets.hpp; no file is opened here), and how a TLS connection is
// described in logs and Received: headers.
#pragma once

#include "libsm/config.hpp"
#include "libsm/secrets.hpp"

#include <boost/asio/ssl.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>

namespace smx::tls {

// The server context: the certificate chain (server certificate first) and
// its key from secrets (Secret::tls_cert, tls_key: PEM bytes, which
// `smx run` read from server.tls_cert and tls_key), TLS 1.2 minimum,
// Mozilla's "intermediate" ciphers, session tickets. Built once per process
// and shared by all sessions. Throws ConfigError naming the key (and the
// file, from cfg) when the bytes are not PEM or the key does not match.
std::unique_ptr<boost::asio::ssl::context> server_context(const ServerConfig& cfg,
                                                          const Secrets& secrets);

// The client context for SMTPC: TLS 1.2 minimum, OpenSSL's default ciphers,
// trust anchors from client.tls_ca_file (Secret::tls_ca_file, its PEM
// bytes) else the system's, for the verify level. Throws ConfigError when
// the CA bundle holds no certificate or a broken one.
std::unique_ptr<boost::asio::ssl::context> client_context(const ClientConfig& cfg,
                                                          const Secrets& secrets);

// "TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits)", as postfix
// writes it.
std::string describe(SSL* ssl);

// Why a TLS operation failed, for logs (OpenSSL's reason when it has one).
std::string reason(const boost::system::error_code& ec);

} // namespace smx::tls
