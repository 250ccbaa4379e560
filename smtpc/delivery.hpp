// One DELIVER from QMGR → one RESULT: reads the CDB file, finds or opens a
// session to the destination, runs the transaction, returns the session to
// the cache.
#pragma once

#include "connection_cache.hpp"
#include "nexthop.hpp"
#include "tls_sessions.hpp"

#include "config.hpp"
#include "credentials.hpp"
#include "messages.hpp"

namespace smtpc {

class Deliverer {
public:
    // tls: the client context (sm::tls::client_context), built once at
    // start; null: no STARTTLS. creds: client.sasl_password_file (null:
    // none). resume: TLS sessions per next hop (null: no resumption).
    Deliverer(const sm::Config& cfg, Resolver& dns, ConnectionCache& cache,
              asio::ssl::context* tls = nullptr, const sm::CredentialMap* creds = nullptr,
              TlsSessions* resume = nullptr)
        : cfg_(cfg), spool_(cfg.spool_dir_abs()), dns_(dns), cache_(cache), tls_(tls),
          creds_(creds), resume_(resume) {}

    // Never takes longer than client.delivery_timeout; every recipient of d
    // has a result, and the RESULT fits in a record.
    asio::awaitable<sm::msg::Result> deliver(const sm::msg::Deliver& d);

private:
    // Cached connections, then each next hop in turn; fills in r.rcpts.
    asio::awaitable<void> attempt(const sm::msg::Deliver& d, const MessageFile& file,
                                  sm::msg::Result& r);

    // The credentials for one next hop of a DELIVER, or null.
    const sm::Credentials* credentials_for(const std::string& nexthop) const;

    const sm::Config& cfg_;
    const std::string spool_;
    Resolver& dns_;
    ConnectionCache& cache_;
    asio::ssl::context* tls_;
    const sm::CredentialMap* creds_;
    TlsSessions* resume_;
};

// Every recipient gets the same failure (queue file, DNS, connection).
sm::msg::Result fail_all(const sm::msg::Deliver& d, const Failure& f);

// The connection cache key: the nexthops, plus the domain for "mx" routes,
// plus the TLS level (a plaintext connection never serves an encrypt domain).
std::string destination_key(const sm::msg::Deliver& d, sm::ClientTls tls);

// Shortens the texts of r until its record fits in sm::rec::max_body (no
// recipient is ever dropped: QMGR would retry it for nothing).
void fit_result(sm::msg::Result& r);

} // namespace smtpc
