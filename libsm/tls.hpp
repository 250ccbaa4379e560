// TLS policy shared by SMTPS (STARTTLS server), SMTPC (STARTTLS client) and
// `smx check-config`: the OpenSSL contexts and how a TLS connection is
// described in logs and Received: headers.
#pragma once

#include "config.hpp"

#include <boost/asio/ssl.hpp>
#include <boost/system/error_code.hpp>
#include <memory>
#include <string>

namespace sm::tls {

// The server context: server.tls_cert (PEM chain) and server.tls_key, TLS
// 1.2 minimum, Mozilla's "intermediate" ciphers, session tickets. Built once
// per process and shared by all sessions. Throws ConfigError naming the key
// when a file cannot be read or the key does not match the certificate.
std::unique_ptr<boost::asio::ssl::context> server_context(const ServerConfig& cfg);

// The client context for SMTPC: TLS 1.2 minimum, OpenSSL's default ciphers,
// trust anchors from client.tls_ca_file (else the system's) for the verify
// level. Throws ConfigError when the CA file cannot be read.
std::unique_ptr<boost::asio::ssl::context> client_context(const ClientConfig& cfg);

// "TLSv1.3 with cipher TLS_AES_256_GCM_SHA384 (256/256 bits)", as postfix
// writes it.
std::string describe(SSL* ssl);

// Why a TLS operation failed, for logs (OpenSSL's reason when it has one).
std::string reason(const boost::system::error_code& ec);

} // namespace sm::tls
