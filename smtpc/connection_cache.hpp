// Idle SMTP sessions per destination, reused for the next message to the
// same destination. An idle session is closed after client.idle_timeout
// (with QUIT), when the server speaks or hangs up while it is idle, or after
// client.max_msgs_per_connection transactions.
#pragma once

#include "smtpc/session.hpp"

#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace smx::smtpc {

class ConnectionCache {
public:
    explicit ConnectionCache(const smx::ClientConfig& cfg) : cfg_(&cfg) {}

    // An idle session for dest, or null.
    std::shared_ptr<Session> take(const std::string& dest);
    // Returns a session after a transaction; keeps it if it is still good.
    void put(const std::string& dest, std::shared_ptr<Session> s);
    // Closes every idle session (shutdown).
    void close_all();
    // Reload: closes every idle session (made with the old settings) and
    // takes idle_timeout and max_msgs_per_connection from cfg. keep owns cfg
    // and what the sessions put from now on refer to (their TLS context): a
    // QUIT under way holds it.
    void reload(std::shared_ptr<const void> keep, const smx::ClientConfig& cfg);
    std::size_t idle() const;

private:
    void remove(const std::string& dest, const std::shared_ptr<Session>& s);

    std::shared_ptr<const void> keep_;  // null: cfg_ is the start's
    const smx::ClientConfig* cfg_;
    std::unordered_map<std::string, std::vector<std::shared_ptr<Session>>> idle_;
};

} // namespace smx::smtpc
