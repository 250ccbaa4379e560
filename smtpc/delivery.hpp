// One DELIVER from QMGR → one RESULT: reads the content file, finds or opens a
// session to the destination, runs the transaction, returns the session to
// the cache.
#pragma once

#include "smtpc/connection_cache.hpp"
#include "smtpc/nexthop.hpp"
#include "smtpc/tls_sessions.hpp"

#include "libsm/config.hpp"
#include "libsm/credentials.hpp"
#include "libsm/messages.hpp"

namespace smx::smtpc {

class Deliverer {
public:
    // tls: the client context (smx::tls::client_context); null: no STARTTLS.
    // creds: client.sasl_password_file (null: none); resume: TLS sessions per
    // next hop, kept for tls (null: no resumption). All are the start's and
    // must outlive the Deliverer (a reload replaces them with ones it owns).
    Deliverer(const smx::Config& cfg, Resolver& dns, ConnectionCache& cache,
              asio::ssl::context* tls = nullptr, const smx::CredentialMap* creds = nullptr,
              TlsSessions* resume = nullptr);

    // Never takes longer than client.delivery_timeout; every recipient of d
    // has a result, and the RESULT fits in a record.
    asio::awaitable<smx::msg::Result> deliver(const smx::msg::Deliver& d);

    // Deliveries from now on use cfg ([client], [tls_policy]), tls, creds
    // and resume (sessions for tls); those under way finish with what they
    // started with, and their connections are then closed, not cached, as
    // are the idle ones now.
    void reload(std::shared_ptr<const smx::Config> cfg, std::shared_ptr<asio::ssl::context> tls,
                std::shared_ptr<const smx::CredentialMap> creds,
                std::shared_ptr<TlsSessions> resume);

private:
    // One config with its TLS context, credentials and TLS sessions; a
    // delivery keeps the one it began with.
    struct Settings {
        std::shared_ptr<const smx::Config> cfg;
        std::shared_ptr<asio::ssl::context> tls;
        std::shared_ptr<const smx::CredentialMap> creds;
        std::shared_ptr<TlsSessions> resume;  // after tls: goes before its context
    };
    // The credentials for one next hop of a DELIVER, or null.
    static const smx::Credentials* credentials_for(const Settings& st, const std::string& nexthop);
    // Cached connections, then each next hop in turn; fills in r.rcpts.
    asio::awaitable<void> attempt(const Settings& st, const smx::msg::Deliver& d,
                                  const MessageFile& file, smx::msg::Result& r);
    // A session back from a transaction under st: cached if st is current.
    void done_with(const Settings& st, const std::string& key, std::shared_ptr<Session> s);

    std::shared_ptr<const Settings> settings_;
    const smx::content::Store store_;  // where content is read, and who wrote it
    // Segments stay open while deliveries run, up to segment_age since they
    // were made (QMGR may remove them then); all go a second after the last
    // delivery ended, so a removed segment's space is never held long by an
    // idle SMTPC.
    smx::content::SegmentFds segments_;
    std::size_t running_ = 0;
    std::optional<asio::steady_timer> idle_close_;
    Resolver& dns_;
    ConnectionCache& cache_;
};

// Every recipient gets the same failure (queue file, DNS, connection).
smx::msg::Result fail_all(const smx::msg::Deliver& d, const Failure& f);

// The connection cache key: the nexthops, plus the domain for "mx" routes,
// plus the TLS level (a plaintext connection never serves an encrypt domain).
std::string destination_key(const smx::msg::Deliver& d, smx::ClientTls tls);

// Shortens the texts of r until its record fits in smx::rec::max_body (no
// recipient is ever dropped: QMGR would retry it for nothing).
void fit_result(smx::msg::Result& r);

} // namespace smx::smtpc
