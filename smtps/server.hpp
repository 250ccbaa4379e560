// The SMTP listener of one event-loop thread: accepts connections, enforces
// max_connections through the process-wide Shared, and runs one session
// coroutine per connection on its own io thread (which asks QMGR's anvil
// for the per-client limits, smtps/client_limits.hpp).
#pragma once

#include "libsm/config.hpp"
#include "libsm/messages.hpp"
#include "libsm/policy_tables.hpp"
#include "libsm/rejections.hpp"
#include "libsm/rewrite.hpp"
#include "libsm/session_counts.hpp"
#include "smtps/client_check.hpp"
#include "smtps/content_writer.hpp"
#include "smtps/policy.hpp"
#include "smtps/policy_client.hpp"
#include "smtps/qmgr_client.hpp"
#include "smtps/transaction_gate.hpp"

#include <boost/asio.hpp>
#include <boost/asio/ssl/context.hpp>
#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>

namespace smx::smtps {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// What the sessions share and a reload replaces as a whole: a session keeps
// the Settings it started with until it ends.
struct Settings {
    // tls: the STARTTLS context (smx::tls::server_context; one per config, so
    // its session cache and ticket keys are shared); null when
    // server.tls_security_level is none. Opens the [policy] tables: throws
    // ConfigError for one that cannot be opened.
    Settings(std::shared_ptr<const smx::Config> cfg, std::shared_ptr<asio::ssl::context> tls);
    Settings(const Settings&) = delete;
    Settings& operator=(const Settings&) = delete;

    const std::shared_ptr<const smx::Config> config;
    const RelayPolicy policy;
    const smx::PolicyTables tables;
    // [rewrite]: its tables are opened here, at start and at each reload
    // (a table that cannot be opened refuses the reload).
    const smx::Rewriter rewrite;
    const std::shared_ptr<asio::ssl::context> tls;
    // The EHLO reply; with STARTTLS in it when offer_tls and TLS is configured.
    const std::string& ehlo_reply(bool offer_tls) const {
        return offer_tls && tls ? ehlo_reply_tls_ : ehlo_reply_;
    }
    const smx::ServerConfig& server() const { return config->server; }

private:
    std::string ehlo_reply_, ehlo_reply_tls_;
};

// What the Servers of all threads share: the Settings a reload replaces and
// the count of sessions, so that max_connections holds for the process (and
// with the other processes' counts for all), not per thread. Any thread may
// call it; the mutex is never held across I/O.
class Shared {
public:
    // cfg and tls are the start's and not owned: they must outlive this (a
    // reload replaces them with ones the Settings own).
    Shared(const smx::Config& cfg, asio::ssl::context* tls);

    // The current Settings; a new session takes them once.
    std::shared_ptr<const Settings> settings() const;
    // New sessions get cfg (relay networks and domains, limits, timeouts)
    // and tls (a new certificate); running ones finish with what they have.
    void reload(std::shared_ptr<const smx::Config> cfg, std::shared_ptr<asio::ssl::context> tls);

    // Once, before the first session: the sessions this process's
    // descriptors allow, and, as one of several smx-smtps processes, the
    // shared counts (its slot) that max_connections holds for together.
    void limit_process(unsigned own_max, smx::SessionCounts* counts, unsigned slot);

    // Empty when one more connection is within max_connections (it is
    // then counted until release), else the 421 reply.
    std::string admit();
    void release();

    std::size_t sessions() const;
    // Sessions between the end of DATA and their reply being written: a
    // shutdown waits for these so that no accepted message goes unanswered.
    std::size_t committing() const { return committing_; }
    // Counts a failed TLS handshake; returns the count so far.
    std::uint64_t tls_handshake_failed() { return ++tls_failures_; }

    class CommitGuard {
    public:
        explicit CommitGuard(Shared& s) : s_(s) { ++s_.committing_; }
        ~CommitGuard() { --s_.committing_; }
        CommitGuard(const CommitGuard&) = delete;
        CommitGuard& operator=(const CommitGuard&) = delete;

    private:
        Shared& s_;
    };

private:
    mutable std::mutex mu_;
    std::shared_ptr<const Settings> settings_;
    std::size_t sessions_ = 0;
    unsigned own_max_ = ~0u;
    smx::SessionCounts* counts_ = nullptr;  // several processes: ours is counts_[slot_]
    unsigned slot_ = 0;
    std::atomic<std::size_t> committing_{0};
    std::atomic<std::uint64_t> tls_failures_{0};
};

class Server {
public:
    // shared is held by every session, which may outlive the Server when
    // its coroutine is destroyed with the io_context at exit. loops: how
    // many Servers (event loops) share server.max_transactions.
    Server(asio::any_io_executor ex, std::shared_ptr<Shared> shared, QmgrClient& qmgr,
           ContentStore& store, unsigned loops);

    // Serves an already listening socket.
    void listen(tcp::acceptor acceptor);
    // Stops accepting; running sessions continue. Call on this Server's thread.
    void stop_accepting();
    // Connections this Server's loop took from the kernel (those refused for
    // the connection limits too).
    unsigned long accepted() const { return accepted_; }
    // Tells QMGR this loop's sessions and transactions (`smx stats`) when
    // they change, and the refusals and milter failures since the last
    // report, at most once a second, while the QMGR link is up.
    void start_load_reports(unsigned loop);
    // This loop's refusals not yet reported (sessions hold it: shared).
    const std::shared_ptr<smx::RejectionCounts>& rejections() const { return rejections_; }
    // This loop's milter failures not yet reported (sessions hold it too).
    const std::shared_ptr<smx::msg::MilterFailureCounts>& milter_failures() const {
        return milter_failures_;
    }

    std::shared_ptr<const Settings> settings() const { return shared_->settings(); }
    Shared& shared() { return *shared_; }
    QmgrClient& qmgr() { return qmgr_; }
    ContentStore& store() { return store_; }
    // This loop's content segment (null with queue.content_segments off).
    const std::shared_ptr<SegmentWriter>& segment() const { return segment_; }
    const std::shared_ptr<TransactionGate>& gate() { return gate_; }
    // This loop's client name and DNSBL lookups (smtps/client_check.hpp).
    ClientChecks& client_checks() { return client_checks_; }
    // This loop's connections to the policy services (sessions hold it:
    // shared).
    const std::shared_ptr<PolicyClient>& policy_client() const { return policy_client_; }
    // This loop's share of max_transactions (0: no limit).
    std::size_t transaction_limit(const smx::ServerConfig& cfg) const {
        return (cfg.max_transactions + loops_ - 1) / loops_;
    }

private:
    asio::awaitable<void> accept_loop(tcp::acceptor& acceptor);
    asio::awaitable<void> report_load(unsigned loop);

    asio::any_io_executor ex_;
    std::shared_ptr<Shared> shared_;
    QmgrClient& qmgr_;
    ContentStore& store_;
    const std::shared_ptr<SegmentWriter> segment_;
    const unsigned loops_;
    const std::shared_ptr<TransactionGate> gate_ = std::make_shared<TransactionGate>();
    ClientChecks client_checks_;
    const std::shared_ptr<PolicyClient> policy_client_ = std::make_shared<PolicyClient>(ex_);
    std::list<tcp::acceptor> acceptors_;
    unsigned long accepted_ = 0;
    // This loop's sessions; shared, as a session's coroutine may outlive
    // the Server at exit.
    const std::shared_ptr<std::size_t> sessions_ = std::make_shared<std::size_t>(0);
    const std::shared_ptr<smx::RejectionCounts> rejections_ =
        std::make_shared<smx::RejectionCounts>();
    const std::shared_ptr<smx::msg::MilterFailureCounts> milter_failures_ =
        std::make_shared<smx::msg::MilterFailureCounts>();
};

// The printable client address: v4-mapped IPv6 is shown as IPv4.
std::string client_ip(const tcp::endpoint& ep);

} // namespace smx::smtps
