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

// What the sessions share and a reload replaces as a whole: a session keeps
// the Settings it started with until it ends.
struct Settings {
    // tls: the STARTTLS context (sm::tls::server_context; one per config, so
    // its session cache and ticket keys are shared); null when
    // server.tls_security_level is none.
    Settings(std::shared_ptr<const sm::Config> cfg, std::shared_ptr<asio::ssl::context> tls);
    Settings(const Settings&) = delete;
    Settings& operator=(const Settings&) = delete;

    const std::shared_ptr<const sm::Config> config;
    const RelayPolicy policy;
    const std::shared_ptr<asio::ssl::context> tls;
    // The EHLO reply; with STARTTLS in it when offer_tls and TLS is configured.
    const std::string& ehlo_reply(bool offer_tls) const {
        return offer_tls && tls ? ehlo_reply_tls_ : ehlo_reply_;
    }
    const sm::ServerConfig& server() const { return config->server; }

private:
    std::string ehlo_reply_, ehlo_reply_tls_;
};

class Server {
public:
    // cfg and tls are the start's; they must outlive the Server (a reload
    // replaces them with ones the Server owns).
    Server(asio::any_io_executor ex, const sm::Config& cfg, QmgrClient& qmgr, CdbStore& cdb,
           asio::ssl::context* tls = nullptr);

    // New sessions get cfg (relay networks and domains, limits, timeouts)
    // and tls (a new certificate); running ones finish with what they have.
    void reload(std::shared_ptr<const sm::Config> cfg, std::shared_ptr<asio::ssl::context> tls);

    // Serves an already listening socket.
    void listen(tcp::acceptor acceptor);
    // Stops accepting; running sessions continue.
    void stop_accepting();

    std::size_t sessions() const { return counts_->sessions; }
    // Sessions between the end of DATA and their reply being written: a
    // shutdown waits for these so that no accepted message goes unanswered.
    std::size_t committing() const { return counts_->committing; }

    // Shared by all sessions; a new session takes settings() once.
    const std::shared_ptr<const Settings>& settings() const { return settings_; }
    QmgrClient& qmgr() { return qmgr_; }
    CdbStore& cdb() { return cdb_; }
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
    std::shared_ptr<const Settings> settings_;
    QmgrClient& qmgr_;
    CdbStore& cdb_;
    std::list<tcp::acceptor> acceptors_;
    std::shared_ptr<Counts> counts_ = std::make_shared<Counts>();
};

// The printable client address: v4-mapped IPv6 is shown as IPv4.
std::string client_ip(const tcp::endpoint& ep);

} // namespace smtps
