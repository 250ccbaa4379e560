#include "smtpc/nexthop.hpp"

#include "libsm/await.hpp"
#include "libsm/config.hpp"
#include "libsm/domain.hpp"
#include "libsm/panic.hpp"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <optional>
#include <random>
#include <spdlog/spdlog.h>

namespace smx::smtpc {
namespace {

using namespace std::chrono_literals;

// TTLs are clamped: a zero TTL (hosts file) must not mean a query per
// message, and an hour bounds how long a changed record is ignored.
constexpr std::uint32_t min_ttl = 1, max_ttl = 3600, negative_ttl = 60;
constexpr std::size_t max_cache_entries = 10000;
// Addresses tried per nexthop, like postfix's smtp_mx_address_limit.
constexpr std::size_t max_targets = 5;

std::optional<asio::ip::address> ip_literal(std::string host) {
    if (host.size() > 5 && smx::lower(host.substr(0, 5)) == "ipv6:") host.erase(0, 5);
    boost::system::error_code ec;
    auto a = asio::ip::make_address(host, ec);
    if (ec) return std::nullopt;
    return a;
}

// nxdomain: the enhanced code of NXDOMAIN (see Resolver::Role).
Failure dns_failure(const std::string& name, const char* type, int status,
                    const char* nxdomain = "5.1.2") {
    Failure f;
    const std::string where = "name service error for name=" + name + " type=" + type + ": ";
    if (status == ARES_ENOTFOUND || status == ARES_ENODATA) {
        // NXDOMAIN: the name does not exist; NODATA: it exists but has no
        // record of the type (unable to route).
        f.code = 550;
        f.enhanced = status == ARES_ENOTFOUND ? nxdomain : "5.4.4";
        f.text = "Host or domain name not found. " + where + "Host not found";
    } else {
        f.text = "Temporary failure: " + where + ares_strerror(status);
    }
    return f;
}

// Skips one (possibly compressed) domain name; returns the offset after it
// or -1 when it runs past the end.
int skip_name(const unsigned char* p, int len, int off) {
    while (off < len) {
        const unsigned char b = p[off];
        if (b == 0) return off + 1;
        if ((b & 0xC0) == 0xC0) return off + 2 <= len ? off + 2 : -1;
        off += b + 1;
    }
    return -1;
}

// An IPv4/IPv6 socket address as an asio address (the scope id is left
// out: addresses are compared with the ones DNS gives, which have none).
std::optional<asio::ip::address> to_address(const sockaddr* sa) {
    if (!sa) return std::nullopt;
    if (sa->sa_family == AF_INET) {
        const auto* sin = reinterpret_cast<const sockaddr_in*>(sa);
        return asio::ip::address_v4(ntohl(sin->sin_addr.s_addr));
    }
    if (sa->sa_family == AF_INET6) {
        const auto* sin6 = reinterpret_cast<const sockaddr_in6*>(sa);
        asio::ip::address_v6::bytes_type b;
        std::copy_n(sin6->sin6_addr.s6_addr, 16, b.begin());
        return asio::ip::address_v6(b);
    }
    return std::nullopt;
}

// Every address of the local interfaces (what a wildcard listen means).
std::vector<asio::ip::address> interface_addresses() {
    std::vector<asio::ip::address> out;
    ifaddrs* ifa = nullptr;
    if (::getifaddrs(&ifa) != 0) return out;
    for (auto* i = ifa; i; i = i->ifa_next) {
        if (auto a = to_address(i->ifa_addr)) out.push_back(*a);
    }
    ::freeifaddrs(ifa);
    return out;
}

} // namespace

void keep_failure(std::optional<Failure>& kept, Failure f) {
    if (kept && kept->temporary() && !f.temporary()) return;
    kept = std::move(f);
}

std::string Target::relay() const {
    return host + "[" + ep.address().to_string() + "]:" + std::to_string(ep.port());
}

std::uint32_t answer_ttl(const unsigned char* p, int len) {
    if (len < 12) return 0;
    const int qd = (p[4] << 8) | p[5], an = (p[6] << 8) | p[7];
    int off = 12;
    for (int i = 0; i < qd && off >= 0; ++i) {
        off = skip_name(p, len, off);
        if (off >= 0) off += 4;
    }
    std::uint32_t ttl = 0;
    bool any = false;
    for (int i = 0; i < an && off >= 0; ++i) {
        off = skip_name(p, len, off);
        if (off < 0 || off + 10 > len) break;
        const std::uint32_t t = (std::uint32_t(p[off + 4]) << 24) | (p[off + 5] << 16) |
                                (p[off + 6] << 8) | p[off + 7];
        ttl = any ? std::min(ttl, t) : t;
        any = true;
        off += 10 + ((p[off + 8] << 8) | p[off + 9]);
    }
    return ttl;
}

// c-ares tells us which sockets it wants watched; each gets a descriptor on
// our io_context that never owns the fd (c-ares closes it).
struct Resolver::Watch {
    Watch(asio::any_io_executor ex, ares_socket_t fd) : sd(ex, fd), fd(fd) {}
    asio::posix::stream_descriptor sd;
    ares_socket_t fd;
    bool want_read = false, want_write = false;
    bool reading = false, writing = false;
    bool closed = false;
};

Resolver::Resolver(asio::any_io_executor ex) : ex_(ex), timer_(ex) {
    ares_options opt{};
    opt.sock_state_cb = &Resolver::on_sock_state;
    opt.sock_state_cb_data = this;
    opt.timeout = 2000;  // ms per try, with ARES_OPT_TIMEOUTMS
    opt.tries = 2;
    // Mail domains are absolute: no resolv.conf search list appended.
    opt.flags = ARES_FLAG_NOSEARCH;
    const int rc = ares_init_options(
        &chan_, &opt,
        ARES_OPT_SOCK_STATE_CB | ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES | ARES_OPT_FLAGS);
    if (rc != ARES_SUCCESS) {
        // Without a channel every lookup fails as a temporary DNS error;
        // literal next hops still work.
        spdlog::error("c-ares init failed: {}", ares_strerror(rc));
        chan_ = nullptr;
    }
}

Resolver::~Resolver() {
    if (chan_) ares_destroy(chan_);
    for (auto& [fd, w] : watches_) w->sd.release();
}

bool Resolver::set_servers(const std::string& csv) {
    return chan_ && ares_set_servers_ports_csv(chan_, csv.c_str()) == ARES_SUCCESS;
}

bool Resolver::configure(const smx::Config& cfg) {
    smtp_port_ = cfg.client.smtp_port;
    hostname_ = smx::lower(cfg.server.hostname);
    self_addrs_.clear();
    for (const auto& l : cfg.server.listen) {
        boost::system::error_code ec;
        const auto a = asio::ip::make_address(l.host, ec);
        if (ec) continue;
        if (a.is_unspecified()) {
            for (const auto& i : interface_addresses()) self_addrs_.push_back(i);
        } else {
            self_addrs_.push_back(a);
        }
    }
    return cfg.client.dns_servers.empty() || set_servers(cfg.client.dns_servers_csv());
}

void Resolver::on_sock_state(void* data, ares_socket_t fd, int readable, int writable) {
    auto* self = static_cast<Resolver*>(data);
    auto it = self->watches_.find(fd);
    if (!readable && !writable) {
        if (it != self->watches_.end()) {
            it->second->closed = true;
            it->second->sd.release();  // cancels our waits; c-ares closes the fd
            self->watches_.erase(it);
        }
        return;
    }
    if (it == self->watches_.end())
        it = self->watches_.emplace(fd, std::make_shared<Watch>(self->ex_, fd)).first;
    it->second->want_read = readable;
    it->second->want_write = writable;
    self->arm(it->second);
}

void Resolver::arm(const std::shared_ptr<Watch>& w) {
    using dw = asio::posix::descriptor_base;
    if (w->want_read && !w->reading) wait(w, dw::wait_read, &Watch::reading);
    if (w->want_write && !w->writing) wait(w, dw::wait_write, &Watch::writing);
}

void Resolver::wait(const std::shared_ptr<Watch>& w,
                    asio::posix::descriptor_base::wait_type type, bool Watch::*busy) {
    w.get()->*busy = true;
    w->sd.async_wait(type, [this, w, type, busy](boost::system::error_code ec) {
        w.get()->*busy = false;
        if (ec || w->closed) return;
        const bool rd = type == asio::posix::descriptor_base::wait_read;
        ares_process_fd(chan_, rd ? w->fd : ARES_SOCKET_BAD, rd ? ARES_SOCKET_BAD : w->fd);
        if (!w->closed) arm(w);
        arm_timer();
    });
}

// Retransmissions and query timeouts are driven by ares_timeout().
void Resolver::arm_timer() {
    timeval tv{};
    if (!chan_ || !ares_timeout(chan_, nullptr, &tv)) {
        timer_.cancel();
        return;
    }
    timer_.expires_after(std::chrono::seconds(tv.tv_sec) +
                         std::chrono::microseconds(tv.tv_usec) + 1ms);
    timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;
        ares_process_fd(chan_, ARES_SOCKET_BAD, ARES_SOCKET_BAD);
        arm_timer();
    });
}

void Resolver::finish(Query& q, Answer a, std::uint32_t ttl) {
    ttl = std::clamp(ttl, min_ttl, max_ttl);
    a.expires = std::chrono::steady_clock::now() + std::chrono::seconds(ttl);
    // Definite answers are cached; server failures and timeouts are not.
    if (a.status == ARES_SUCCESS || a.status == ARES_ENODATA || a.status == ARES_ENOTFOUND) {
        if (cache_.size() >= max_cache_entries) {
            const auto now = std::chrono::steady_clock::now();
            std::erase_if(cache_, [&](const auto& e) { return e.second.expires <= now; });
            if (cache_.size() >= max_cache_entries) cache_.clear();
        }
        cache_[q.key] = a;
    }
    if (auto it = pending_.find(q.key); it != pending_.end() && it->second == q.pending)
        pending_.erase(it);
    q.pending->answer = std::move(a);
    q.pending->done = true;
    q.pending->wake.cancel();
}

void Resolver::on_mx(void* arg, int status, int, unsigned char* abuf, int alen) {
    std::unique_ptr<Query> q(static_cast<Query*>(arg));
    if (status == ARES_EDESTRUCTION) return;
    Answer a;
    a.status = status;
    std::uint32_t ttl = negative_ttl;
    if (status == ARES_SUCCESS) {
        ares_mx_reply* mx = nullptr;
        a.status = ares_parse_mx_reply(abuf, alen, &mx);
        for (auto* m = mx; m; m = m->next) a.mx.emplace_back(m->priority, smx::lower(m->host));
        if (mx) ares_free_data(mx);
        if (a.status == ARES_SUCCESS && a.mx.empty()) a.status = ARES_ENODATA;
        if (a.status == ARES_SUCCESS) ttl = answer_ttl(abuf, alen);
        std::stable_sort(a.mx.begin(), a.mx.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
    }
    q->self->finish(*q, std::move(a), ttl);
}

void Resolver::on_addr(void* arg, int status, int, ares_addrinfo* res) {
    std::unique_ptr<Query> q(static_cast<Query*>(arg));
    if (status == ARES_EDESTRUCTION) {
        if (res) ares_freeaddrinfo(res);
        return;
    }
    Answer a;
    a.status = status;
    std::uint32_t ttl = max_ttl;
    for (auto* n = res ? res->nodes : nullptr; n; n = n->ai_next) {
        const auto addr = to_address(n->ai_addr);
        if (!addr) continue;
        if (std::find(a.addrs.begin(), a.addrs.end(), *addr) == a.addrs.end())
            a.addrs.push_back(*addr);
        ttl = std::min(ttl, static_cast<std::uint32_t>(std::max(n->ai_ttl, 0)));
    }
    if (res) ares_freeaddrinfo(res);
    if (a.status == ARES_SUCCESS && a.addrs.empty()) a.status = ARES_ENODATA;
    if (a.status != ARES_SUCCESS) ttl = negative_ttl;
    q->self->finish(*q, std::move(a), ttl);
}

asio::awaitable<Resolver::Answer> Resolver::lookup(Kind kind, const std::string& name_in) {
    const std::string name = smx::lower(name_in);
    const std::string key = (kind == Kind::mx ? "MX " : "A ") + name;
    if (auto it = cache_.find(key); it != cache_.end()) {
        if (it->second.expires > std::chrono::steady_clock::now()) co_return it->second;
        cache_.erase(it);
    }
    if (!chan_) {
        Answer a;
        a.status = ARES_ENOTINITIALIZED;
        co_return a;
    }
    std::shared_ptr<Pending> p;
    if (auto it = pending_.find(key); it != pending_.end()) {
        p = it->second;
    } else {
        p = std::make_shared<Pending>(ex_);
        pending_.emplace(key, p);
        auto* q = new Query{this, key, p};
        // The callback may run before the call returns (hosts file, literal).
        if (kind == Kind::mx) {
            ares_query(chan_, name.c_str(), 1 /* C_IN */, 15 /* T_MX */, &Resolver::on_mx, q);
        } else {
            ares_addrinfo_hints hints{};
            hints.ai_family = AF_UNSPEC;
            hints.ai_socktype = SOCK_STREAM;
            ares_getaddrinfo(chan_, name.c_str(), nullptr, &hints, &Resolver::on_addr, q);
        }
        arm_timer();
    }
    while (!p->done) {
        auto [ec] = co_await p->wake.async_wait(smx::await_tuple);
        (void)ec;  // cancelled is the wake-up; done says whether it was ours
    }
    co_return p->answer;
}

asio::awaitable<Targets> Resolver::addresses(const std::string& host, std::uint16_t port,
                                             Role role) {
    Targets t;
    Answer a = co_await lookup(Kind::addr, host);
    if (a.status != ARES_SUCCESS) {
        t.err = dns_failure(host, "A", a.status, role == Role::domain ? "5.1.2" : "5.4.4");
        co_return t;
    }
    for (const auto& addr : a.addrs) t.list.push_back({host, {addr, port}});
    co_return t;
}

bool Resolver::is_self(const std::string& host, const std::vector<Target>& addrs) const {
    if (!hostname_.empty() && host == hostname_) return true;
    return std::any_of(addrs.begin(), addrs.end(), [&](const Target& t) {
        return std::find(self_addrs_.begin(), self_addrs_.end(), t.ep.address()) !=
               self_addrs_.end();
    });
}

asio::awaitable<Targets> Resolver::targets(const std::string& nexthop,
                                           const std::string& rcpt_domain) {
    Targets t;
    smx::HostPort hp;
    if (nexthop == "mx") {
        hp.host = rcpt_domain;
        hp.port = smtp_port_;
        // A domain literal user@[1.2.3.4] names the address itself.
        if (hp.host.size() > 2 && hp.host.front() == '[' && hp.host.back() == ']') {
            hp.host = hp.host.substr(1, hp.host.size() - 2);
            hp.literal = true;
        }
    } else {
        try {
            hp = smx::parse_hostport("nexthop", nexthop, smtp_port_);
        } catch (const smx::ConfigError& e) {
            t.err = {451, "4.3.5", std::string("bad nexthop: ") + e.what()};
            co_return t;
        }
    }
    if (hp.host.empty()) {
        t.err = {451, "4.3.5", "no recipient domain for MX lookup"};
        co_return t;
    }
    if (auto ip = ip_literal(hp.host)) {
        t.list.push_back({ip->to_string(), {*ip, hp.port}});
        co_return t;
    }
    if (hp.literal) {
        t = co_await addresses(hp.host, hp.port, Role::host);
        co_return t;
    }
    t = co_await mx_targets(smx::lower(hp.host), hp.port);
    co_return t;
}

asio::awaitable<Targets> Resolver::mx_targets(const std::string& domain, std::uint16_t port) {
    Targets t;
    const Failure loop{554, "5.4.6", "mail for " + domain + " loops back to myself"};
    Answer mx = co_await lookup(Kind::mx, domain);
    if (mx.status == ARES_ENODATA || mx.status == ARES_ENOTFOUND) {
        // No MX: the host itself (RFC 5321 5.1). NXDOMAIN still gets an
        // address lookup, which also consults the hosts file.
        t = co_await addresses(domain, port, Role::domain);
        if (!t.list.empty() && is_self(domain, t.list)) t = {{}, loop};
        co_return t;
    }
    if (mx.status != ARES_SUCCESS) {
        t.err = dns_failure(domain, "MX", mx.status);
        co_return t;
    }
    if (mx.mx.size() == 1 && (mx.mx[0].second.empty() || mx.mx[0].second == ".")) {
        t.err = {556, "5.1.10", "Domain " + domain + " does not accept mail (nullMX)"};
        co_return t;
    }
    // Equal preferences in random order (RFC 5321 5.1), new for each
    // delivery so that the load spreads even while the answer is cached.
    static thread_local std::mt19937 rng{std::random_device{}()};
    for (auto first = mx.mx.begin(); first != mx.mx.end();) {
        auto last = std::find_if(first, mx.mx.end(),
                                 [&](const auto& m) { return m.first != first->first; });
        std::shuffle(first, last, rng);
        first = last;
    }
    // As postfix: when we are one of the MX hosts, only the ones preferred
    // to us are tried.
    std::vector<unsigned> prefs;  // of each entry of t.list
    std::optional<unsigned> self_pref;
    std::optional<Failure> err;   // of the hosts without an address
    for (const auto& [pref, host] : mx.mx) {
        if (t.list.size() >= max_targets && pref > prefs.back()) break;  // full, worse MX
        Targets h;
        if (host != hostname_) h = co_await addresses(host, port, Role::host);
        if (is_self(host, h.list)) {
            while (!prefs.empty() && prefs.back() >= pref) {
                prefs.pop_back();
                t.list.pop_back();
            }
            self_pref = pref;
            break;
        }
        if (h.list.empty()) {
            keep_failure(err, std::move(h.err));
            continue;
        }
        for (auto& x : h.list) {
            if (t.list.size() >= max_targets) break;
            t.list.push_back(std::move(x));
            prefs.push_back(pref);
        }
    }
    // Some MX host had addresses: the failures of the others do not matter.
    if (!t.list.empty()) co_return t;
    if (self_pref && *self_pref == mx.mx.front().first) {
        t.err = loop;  // we are the best MX: nobody else would take it
    } else if (self_pref) {
        // A backup MX whose better hosts all failed: the mail waits for
        // them; it does not loop.
        t.err = {451, "4.4.4", "unable to find primary relay for " + domain};
    } else {
        // Every MX host failed (an MX list is never empty).
        if (!err) smx::panic("smtpc: no address and no failure for MX of " + domain);
        t.err = std::move(*err);
    }
    co_return t;
}

} // namespace smx::smtpc
