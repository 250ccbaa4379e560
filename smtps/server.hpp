// The SMTP listener: accepts connections, enforces the connection limits
// (total and per client; relay_networks are exempt from the latter) and runs
// one session coroutine per connection on the same io thread.
#pragma once

#include "cdb_writer.hpp"
#include "config.hpp"
#include "policy.hpp"
#include "qmgr_client.hpp"

#include <boost/asio.hpp>
#include <list>
#include <string>
#include <unordered_map>

namespace smtps {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

class Server {
public:
    Server(asio::any_io_executor ex, const sm::Config& cfg, QmgrClient& qmgr, CdbStore& cdb);

    // Serves an already listening socket.
    void listen(tcp::acceptor acceptor);
    // Stops accepting; running sessions continue.
    void stop_accepting();

    std::size_t sessions() const { return sessions_; }
    // Sessions between the end of DATA and their reply being written: a
    // shutdown waits for these so that no accepted message goes unanswered.
    std::size_t committing() const { return committing_; }

    // Shared by all sessions.
    const sm::ServerConfig& cfg() const { return cfg_.server; }
    const RelayPolicy& policy() const { return policy_; }
    QmgrClient& qmgr() { return qmgr_; }
    CdbStore& cdb() { return cdb_; }
    const std::string& ehlo_reply() const { return ehlo_reply_; }

    class CommitGuard {
    public:
        explicit CommitGuard(Server& s) : s_(s) { ++s_.committing_; }
        ~CommitGuard() { --s_.committing_; }
        CommitGuard(const CommitGuard&) = delete;
        CommitGuard& operator=(const CommitGuard&) = delete;

    private:
        Server& s_;
    };

private:
    asio::awaitable<void> accept_loop(tcp::acceptor& acceptor);
    // Empty when the connection is within the limits, else the 421 reply.
    std::string admit(const std::string& ip, bool trusted);
    void release(const std::string& ip, bool counted_per_client);

    asio::any_io_executor ex_;
    const sm::Config& cfg_;
    QmgrClient& qmgr_;
    CdbStore& cdb_;
    RelayPolicy policy_;
    std::string ehlo_reply_;
    std::list<tcp::acceptor> acceptors_;
    std::unordered_map<std::string, unsigned> per_client_;
    std::size_t sessions_ = 0;
    std::size_t committing_ = 0;
};

// The printable client address: v4-mapped IPv6 is shown as IPv4.
std::string client_ip(const tcp::endpoint& ep);

} // namespace smtps
