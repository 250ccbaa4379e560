// DNS through c-ares on one event loop's executor (one Resolver per loop: no
// locks): MX and address lookups for SMTPC's next hops, PTR, address and
// DNSBL (A) lookups for SMTPS's client checks. Answers are cached by TTL in
// a bounded cache; concurrent lookups of one name share one query; a caller
// may stop waiting at its own deadline (the query runs on and fills the
// cache), so a name server that answers slowly or not at all costs a
// session at most its deadline.
#pragma once

#include <ares.h>
#include <boost/asio.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace smx::dns {

namespace asio = boost::asio;
using Clock = std::chrono::steady_clock;

enum class Kind {
    mx,    // MX records of a name
    addr,  // A and AAAA of a name (the hosts file first, as getaddrinfo)
    ptr,   // the names of an address (the hosts file first, as getnameinfo)
    a,     // A records only, from DNS (a DNSBL query)
};

struct Answer {
    int status = ARES_SUCCESS;  // ares status of the lookup; ARES_ETIMEOUT past a deadline
    std::vector<std::pair<unsigned, std::string>> mx;  // preference, host (lower case)
    std::vector<asio::ip::address> addrs;              // addr, a
    std::vector<std::string> names;                    // ptr (lower case)
    Clock::time_point expires;
    // A definite answer: the records, or that there are none (NXDOMAIN,
    // NODATA); anything else is a temporary failure.
    bool definite() const {
        return status == ARES_SUCCESS || status == ARES_ENODATA || status == ARES_ENOTFOUND;
    }
};

class Resolver {
    struct Pending;

public:
    explicit Resolver(asio::any_io_executor ex);
    ~Resolver();
    Resolver(const Resolver&) = delete;
    Resolver& operator=(const Resolver&) = delete;

    // Overrides the name servers of /etc/resolv.conf ("127.0.0.1:5353,...").
    bool set_servers(const std::string& csv);

    // A lookup under way: its answer already (cached), or one to wait for.
    class Lookup {
        friend class Resolver;
        std::optional<Answer> ready_;
        std::shared_ptr<Pending> pending_;
    };
    // Starts a lookup (several may be started, then waited for in turn:
    // they run at the same time). name: a domain, or for ptr an address.
    Lookup start(Kind kind, const std::string& name);
    // Its answer, or ARES_ETIMEOUT at deadline.
    asio::awaitable<Answer> wait(Lookup l, Clock::time_point deadline = Clock::time_point::max());
    asio::awaitable<Answer> lookup(Kind kind, const std::string& name,
                                   Clock::time_point deadline = Clock::time_point::max()) {
        co_return co_await wait(start(kind, name), deadline);
    }

    // Cached answers (tests: the cache stays bounded).
    std::size_t cached() const { return cache_.size(); }

private:
    struct Query {
        Resolver* self;
        std::string key;
        Kind kind;
        std::shared_ptr<Pending> pending;
    };
    struct Watch;

    void finish(Query& q, Answer a, std::uint32_t ttl);
    static void on_raw(void* arg, int status, int timeouts, unsigned char* abuf, int alen);
    static void on_addr(void* arg, int status, int timeouts, struct ares_addrinfo* res);
    static void on_host(void* arg, int status, int timeouts, struct hostent* h);
    static void on_sock_state(void* data, ares_socket_t fd, int readable, int writable);
    void arm(const std::shared_ptr<Watch>& w);
    void wait_fd(const std::shared_ptr<Watch>& w, asio::posix::descriptor_base::wait_type type,
                 bool Watch::*busy);
    void arm_timer();

    asio::any_io_executor ex_;
    ares_channel chan_ = nullptr;
    asio::steady_timer timer_;
    std::map<ares_socket_t, std::shared_ptr<Watch>> watches_;
    std::unordered_map<std::string, Answer> cache_;
    std::unordered_map<std::string, std::shared_ptr<Pending>> pending_;
};

// An IPv4/IPv6 socket address as an asio address (the scope id is left
// out: addresses are compared with the ones DNS gives, which have none).
std::optional<asio::ip::address> to_address(const sockaddr* sa);

// Labels of letters, digits, '-' and '_', 1 to 63 long, 253 in all: a name
// that may go into a log line or a header (a PTR answer is anyone's text).
bool valid_hostname(std::string_view name);

// The minimum TTL of the answer records of a DNS response; 0 when none.
std::uint32_t answer_ttl(const unsigned char* abuf, int alen);

} // namespace smx::dns
