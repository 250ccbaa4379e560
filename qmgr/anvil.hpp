// QMGR's anvil: the one table of per-client counts that every smx-smtps
// event loop asks over its QMGR link (ANVIL_REQ), as postfix's smtpd asks
// anvil(8), so that the per-client limits hold for all loops and
// processes together. It counts; SMTPS compares with its limits
// (smtps/client_limits.hpp), except for the RCPT a MAIL may have granted
// ahead, which it grants only under the limit it is told.
//
// Each client has its concurrent connections, kept per link so that a
// link that goes (an smx-smtps that died) takes its connections with it,
// and connection, MAIL and RCPT rates over one rate_time_unit window that
// starts with the first event after the last one ended, as postfix's.
// Memory is bounded: a client without connections is forgotten a
// rate_time_unit after it was last seen (its rates would start again), and
// past max_clients the least recently seen one without connections goes
// first. Clients with connections are at most server.max_connections, so
// the table holds at most max_clients + max_connections clients.
#pragma once

#include "libsm/messages.hpp"

#include <chrono>
#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>

namespace smx::qmgr {

class Anvil {
public:
    using Time = std::chrono::steady_clock::time_point;

    Anvil(std::chrono::seconds rate_time_unit, std::size_t max_clients);
    // A reload: the next window is of the new length; past the new
    // max_clients the oldest idle clients go with the next new one.
    void configure(std::chrono::seconds rate_time_unit, std::size_t max_clients);

    // One request of an SMTPS link: the reply, or nullopt for the ops that
    // get none (disconnect, unused_rcpt).
    std::optional<smx::msg::AnvilReply> handle(std::uint64_t link, const smx::msg::AnvilRequest& r,
                                               Time now);
    // The link is gone: the connections it counted end.
    void drop_link(std::uint64_t link);

    std::size_t clients() const { return clients_.size(); }
    // Clients forgotten before their time because of max_clients.
    std::uint64_t evicted() const { return evicted_; }
    // The client's concurrent connections (0 when it is not tracked).
    std::uint32_t connections(const std::string& client) const;

private:
    struct Client {
        Time window;   // start of the current rate window
        Time touched;  // last request
        std::uint32_t connections = 0, conn_rate = 0, mail_rate = 0, rcpt_rate = 0;
        // Its place in idle_, while it has no connection.
        std::list<const std::string*>::iterator idle;
    };

    // The client's entry, its window started again when it has ended;
    // forgets expired clients first and, past max_clients, the oldest idle.
    Client& touch(const std::string& key, Time now);
    void expire(Time now);
    void connect(std::uint64_t link, const std::string& key, Client& c);
    void release(const std::string& key, std::uint32_t n, Time now);

    std::chrono::steady_clock::duration unit_;
    std::size_t max_clients_;
    std::unordered_map<std::string, Client> clients_;
    // Clients without connections, least recently touched first (their
    // keys live in clients_, whose nodes do not move).
    std::list<const std::string*> idle_;
    // Per link, its connections per client.
    std::unordered_map<std::uint64_t, std::unordered_map<std::string, std::uint32_t>> links_;
    std::uint64_t evicted_ = 0;
};

} // namespace smx::qmgr
