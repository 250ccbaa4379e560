// Policy delegation (postfix's SMTPD_POLICY_README): SMTPS asks a policy
// service (postgrey, policyd-spf, ...) about a stage of a session with a
// request of name=value lines ended by an empty line, and takes the
// service's "action=..." answer as an access(5) action (docs/policy.md).
//
// One PolicyClient per event loop keeps the connections to the services
// and lends each to one request at a time (one writer per socket); nothing
// is shared between loops, so no lock. A connection is used again while it
// is younger than policy_service_max_ttl, has served fewer than
// policy_service_request_limit requests, and is closed once idle for
// policy_service_max_idle.
#pragma once

#include "libsm/config.hpp"

#include <boost/asio.hpp>
#include <boost/asio/generic/stream_protocol.hpp>

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace smx::smtps {

// A request's attributes in the order they are sent.
using PolicyAttributes = std::vector<std::pair<std::string_view, std::string>>;

// The request as sent: "name=value\n" each, then "\n". A value is a line:
// CR, LF and NUL in it (a client's text) become '?', so that nothing a
// client sends can add an attribute or end the request.
std::string encode_policy_request(const PolicyAttributes& attrs);

// The longest answer taken (postfix's policy answers are one short line);
// a longer one is a failed attempt.
inline constexpr std::size_t max_policy_reply = 4096;

// What the octets of an answer received so far make.
struct PolicyReply {
    enum class Status { incomplete, done, malformed };
    Status status = Status::incomplete;
    std::string action;  // done: the value of action=
    std::string error;   // malformed: why, for the log
};
// in: everything received so far. Attributes other than action are
// ignored; no action, two of them, or a line without '=' is malformed.
PolicyReply parse_policy_reply(std::string_view in);

class PolicyClient {
public:
    explicit PolicyClient(boost::asio::any_io_executor ex);
    ~PolicyClient();
    PolicyClient(const PolicyClient&) = delete;
    PolicyClient& operator=(const PolicyClient&) = delete;

    // The service's action for request (encode_policy_request), after up to
    // cfg.policy_service_try_limit attempts; nullopt when none succeeded
    // (then one warning is logged, naming the service and the last error).
    boost::asio::awaitable<std::optional<std::string>> ask(const smx::PolicyConfig& cfg,
                                                           const smx::ServiceSocket& service,
                                                           const std::string& request);

    // Idle connections kept now (for tests).
    std::size_t idle() const;

private:
    using Socket = boost::asio::generic::stream_protocol::socket;
    using Clock = std::chrono::steady_clock;
    struct Conn {
        Conn(Socket s, boost::asio::any_io_executor ex)
            : sock(std::move(s)), idle_timer(std::move(ex)) {}
        Socket sock;
        boost::asio::steady_timer idle_timer;
        Clock::time_point born = Clock::now();
        unsigned requests = 0;
        std::uint64_t id = 0;  // while idle: the idle timer's own
    };
    // Idle connections by service (its text); shared with their idle timers'
    // handlers, which may run after the client is gone.
    struct Idle {
        std::map<std::string, std::list<std::unique_ptr<Conn>>> by_service;
        std::uint64_t next_id = 0;
    };

    // An idle connection to service that may serve one more request.
    std::unique_ptr<Conn> take(const smx::PolicyConfig& cfg, const smx::ServiceSocket& service);
    // Back into the pool after a request it answered, unless past its limits.
    void give_back(const smx::PolicyConfig& cfg, const smx::ServiceSocket& service,
                   std::unique_ptr<Conn> c);
    // A new connection, or null with err set.
    boost::asio::awaitable<std::unique_ptr<Conn>> connect(const smx::ServiceSocket& service,
                                                          Clock::duration timeout, std::string& err);
    // One request and its answer on c: the action, or nullopt with err set
    // (sent_nothing_back: the connection ended before any octet of answer).
    boost::asio::awaitable<std::optional<std::string>> exchange(Conn& c, const std::string& request,
                                                               Clock::duration timeout,
                                                               std::string& err,
                                                               bool& sent_nothing_back);

    boost::asio::any_io_executor ex_;
    std::shared_ptr<Idle> idle_ = std::make_shared<Idle>();
};

} // namespace smx::smtps
