// The SMTP listener: accepts connections, enforces the connection limits
// (total and per client; relay_networks are exempt from the latter) and runs
// one session coroutine per connection on the same io thread.
#pragma once

#include "cdb_writer.hpp"
#include "config.hpp"
#include "policy.hpp"
#include "qmgr_client.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl/context.hpp>
#include <list>
#include <memory>
#include <string>
#include <unordered_map>

namespace smtps {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Server {
public:
    // tls: the STARTTLS context (built once at start, sm::tls::server_context);
    // null when server.tls_security_level is none.
    Server(asio::any_io_executor ex, const sm::Config& cfg, QmgrClient& qmgr, CdbStore& cdb,
           asio::ssl::context* tls = nullptr);

    // Serves an already listening socket.
    void listen(tcp::acceptor acceptor);
    // Stops accepting; running sessions continue.
    void stop_accepting();

    std::size_t sessions() const { return counts_->sessions; }
    // Sessions between the end of DATA and their reply being written: a
    // shutdown waits for these so that no accepted message goes unanswered.
    std::size_t committing() const { return counts_->committing; }

    // Shared by all sessions.
    const sm::ServerConfig& cfg() const { return cfg_.server; }
    const RelayPolicy& policy() const { return policy_; }
    QmgrClient& qmgr() { return qmgr_; }
    CdbStore& cdb() { return cdb_; }
    // The EHLO reply; with STARTTLS in it when offer_tls and TLS is configured.
    const std::string& ehlo_reply(bool offer_tls) const {
        return offer_tls && tls_ ? ehlo_reply_tls_ : ehlo_reply_;
    }
    asio::ssl::context* tls() { return tls_; }
    // Counts a failed TLS handshake; returns the count so far.
    std::uint64_t tls_handshake_failed() { return ++counts_->tls_failures; }

    // Session counts live apart from the Server: a session coroutine that is
    // destroyed with the io_context at exit may outlive the Server object.
    struct Counts {
        std::size_t sessions = 0;
        std::size_t committing = 0;
        std::uint64_t tls_failures = 0;
        std::unordered_map<std::string, unsigned> per_client;
        void release(const std::string& ip, bool counted_per_client);
    };
    class CommitGuard {
    public:
        explicit CommitGuard(Server& s) : c_(s.counts_) { ++c_->committing; }
        ~CommitGuard() { --c_->committing; }
        CommitGuard(const CommitGuard&) = delete;
        CommitGuard& operator=(const CommitGuard&) = delete;

    private:
        std::shared_ptr<Counts> c_;
    };

private:
    asio::awaitable<void> accept_loop(tcp::acceptor& acceptor);
    // Empty when the connection is within the limits, else the 421 reply.
    std::string admit(const std::string& ip, bool trusted);

    asio::any_io_executor ex_;
    const sm::Config& cfg_;
    QmgrClient& qmgr_;
    CdbStore& cdb_;
    RelayPolicy policy_;
    asio::ssl::context* tls_;
    std::string ehlo_reply_, ehlo_reply_tls_;
    std::list<tcp::acceptor> acceptors_;
    std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

// The printable client address: v4-mapped IPv6 is shown as IPv4.
std::string client_ip(const tcp::endpoint& ep);

} // namespace smtps
