#include "libsm/dns_resolver.hpp"

#include "libsm/await.hpp"
#include "libsm/domain.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <cctype>
#include <spdlog/spdlog.h>

namespace smx::dns {
namespace {

using namespace std::chrono_literals;

// TTLs are clamped: a zero TTL (hosts file) must not mean a query per
// message, and an hour bounds how long a changed record is ignored. c-ares
// gives no TTL with a PTR answer: those live ptr_ttl.
constexpr std::uint32_t min_ttl = 1, max_ttl = 3600, negative_ttl = 60, ptr_ttl = 600;
// Every entry is a few hundred bytes at most: a few MB per event loop.
constexpr std::size_t max_cache_entries = 20000;
// A DNSBL answer holds one or a few addresses; more are not looked at.
constexpr int max_a_records = 16;

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

const char* kind_tag(Kind k) {
    switch (k) {
    case Kind::mx: return "MX ";
    case Kind::addr: return "ADDR ";
    case Kind::ptr: return "PTR ";
    case Kind::a: return "A ";
    }
    return "";
}

} // namespace

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

bool valid_hostname(std::string_view z) {
    if (!z.empty() && z.back() == '.') z.remove_suffix(1);
    if (z.empty() || z.size() > 253) return false;
    std::size_t label = 0;
    for (char c : z) {
        if (c == '.') {
            if (label == 0) return false;
            label = 0;
        } else if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') {
            if (++label > 63) return false;
        } else {
            return false;
        }
    }
    return label > 0;
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

// One query's answer to come, and the coroutines waiting for it (each on
// its own timer, which is its deadline).
struct Resolver::Pending {
    bool done = false;
    Answer answer;
    std::vector<asio::steady_timer*> waiters;
};

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
        // Without a channel every lookup fails as a temporary DNS error.
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
    if (w->want_read && !w->reading) wait_fd(w, dw::wait_read, &Watch::reading);
    if (w->want_write && !w->writing) wait_fd(w, dw::wait_write, &Watch::writing);
}

void Resolver::wait_fd(const std::shared_ptr<Watch>& w,
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
    a.expires = Clock::now() + std::chrono::seconds(ttl);
    // Definite answers are cached; server failures and timeouts are not.
    if (a.definite()) {
        if (cache_.size() >= max_cache_entries) {
            const auto now = Clock::now();
            std::erase_if(cache_, [&](const auto& e) { return e.second.expires <= now; });
            if (cache_.size() >= max_cache_entries) cache_.clear();
        }
        cache_[q.key] = a;
    }
    if (auto it = pending_.find(q.key); it != pending_.end() && it->second == q.pending)
        pending_.erase(it);
    q.pending->answer = std::move(a);
    q.pending->done = true;
    for (auto* t : q.pending->waiters) t->cancel();
}

// MX and A: the raw response, parsed here.
void Resolver::on_raw(void* arg, int status, int, unsigned char* abuf, int alen) {
    std::unique_ptr<Query> q(static_cast<Query*>(arg));
    if (status == ARES_EDESTRUCTION) return;
    Answer a;
    a.status = status;
    std::uint32_t ttl = negative_ttl;
    if (status == ARES_SUCCESS && q->kind == Kind::mx) {
        ares_mx_reply* mx = nullptr;
        a.status = ares_parse_mx_reply(abuf, alen, &mx);
        for (auto* m = mx; m; m = m->next) a.mx.emplace_back(m->priority, smx::lower(m->host));
        if (mx) ares_free_data(mx);
        if (a.status == ARES_SUCCESS && a.mx.empty()) a.status = ARES_ENODATA;
        if (a.status == ARES_SUCCESS) ttl = answer_ttl(abuf, alen);
        std::stable_sort(a.mx.begin(), a.mx.end(),
                         [](const auto& x, const auto& y) { return x.first < y.first; });
    } else if (status == ARES_SUCCESS) {
        ares_addrttl rr[max_a_records];
        int n = max_a_records;
        hostent* h = nullptr;
        a.status = ares_parse_a_reply(abuf, alen, &h, rr, &n);
        if (h) ares_free_hostent(h);
        if (a.status == ARES_SUCCESS) {
            ttl = max_ttl;
            for (int i = 0; i < n; ++i) {
                a.addrs.push_back(asio::ip::address_v4(ntohl(rr[i].ipaddr.s_addr)));
                ttl = std::min(ttl, static_cast<std::uint32_t>(std::max(rr[i].ttl, 0)));
            }
        }
        if (a.status == ARES_SUCCESS && a.addrs.empty()) a.status = ARES_ENODATA;
        if (a.status != ARES_SUCCESS) ttl = negative_ttl;
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

void Resolver::on_host(void* arg, int status, int, hostent* h) {
    std::unique_ptr<Query> q(static_cast<Query*>(arg));
    if (status == ARES_EDESTRUCTION) return;
    Answer a;
    a.status = status;
    if (status == ARES_SUCCESS && h) {
        // Names that are no host names (anyone may publish any PTR text)
        // are left out.
        const auto take = [&](const char* n) {
            if (!n || !valid_hostname(n)) return;
            std::string name = smx::lower(n);
            if (name.back() == '.') name.pop_back();
            if (std::find(a.names.begin(), a.names.end(), name) == a.names.end())
                a.names.push_back(std::move(name));
        };
        take(h->h_name);
        for (char** n = h->h_aliases; n && *n; ++n) take(*n);
    }
    if (a.status == ARES_SUCCESS && a.names.empty()) a.status = ARES_ENODATA;
    const std::uint32_t ttl = a.status == ARES_SUCCESS ? ptr_ttl : negative_ttl;
    q->self->finish(*q, std::move(a), ttl);
}

Resolver::Lookup Resolver::start(Kind kind, const std::string& name_in) {
    Lookup l;
    const std::string name = smx::lower(name_in);
    const std::string key = kind_tag(kind) + name;
    if (auto it = cache_.find(key); it != cache_.end()) {
        if (it->second.expires > Clock::now()) {
            l.ready_ = it->second;
            return l;
        }
        cache_.erase(it);
    }
    Answer fail;
    fail.status = ARES_ENOTINITIALIZED;
    if (!chan_) {
        l.ready_ = fail;
        return l;
    }
    if (auto it = pending_.find(key); it != pending_.end()) {
        l.pending_ = it->second;
        return l;
    }
    in6_addr a6{};
    in_addr a4{};
    const bool v4 = kind == Kind::ptr && ::inet_pton(AF_INET, name.c_str(), &a4) == 1;
    const bool v6 = kind == Kind::ptr && !v4 && ::inet_pton(AF_INET6, name.c_str(), &a6) == 1;
    if (kind == Kind::ptr && !v4 && !v6) {
        fail.status = ARES_EBADNAME;
        l.ready_ = fail;
        return l;
    }
    l.pending_ = std::make_shared<Pending>();
    pending_.emplace(key, l.pending_);
    auto* q = new Query{this, key, kind, l.pending_};
    // The callback may run before the call returns (hosts file, literal).
    switch (kind) {
    case Kind::mx:
        ares_query(chan_, name.c_str(), 1 /* C_IN */, 15 /* T_MX */, &Resolver::on_raw, q);
        break;
    case Kind::a:
        ares_query(chan_, name.c_str(), 1 /* C_IN */, 1 /* T_A */, &Resolver::on_raw, q);
        break;
    case Kind::addr: {
        ares_addrinfo_hints hints{};
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        ares_getaddrinfo(chan_, name.c_str(), nullptr, &hints, &Resolver::on_addr, q);
        break;
    }
    case Kind::ptr:
        if (v4) ares_gethostbyaddr(chan_, &a4, sizeof a4, AF_INET, &Resolver::on_host, q);
        else ares_gethostbyaddr(chan_, &a6, sizeof a6, AF_INET6, &Resolver::on_host, q);
        break;
    }
    arm_timer();
    return l;
}

asio::awaitable<Answer> Resolver::wait(Lookup l, Clock::time_point deadline) {
    if (l.ready_) co_return std::move(*l.ready_);
    const std::shared_ptr<Pending> p = std::move(l.pending_);
    asio::steady_timer t(ex_);
    t.expires_at(deadline);
    p->waiters.push_back(&t);
    // However this coroutine ends (its frame may be destroyed at exit), the
    // query no longer wakes its timer.
    struct Leave {
        Pending& p;
        asio::steady_timer* t;
        ~Leave() { std::erase(p.waiters, t); }
    } leave{*p, &t};
    while (!p->done) {
        if (Clock::now() >= deadline) {
            Answer a;
            a.status = ARES_ETIMEOUT;
            co_return a;
        }
        auto [ec] = co_await t.async_wait(smx::await_tuple);
        (void)ec;  // cancelled is the wake-up; done says whether the answer came
    }
    co_return p->answer;
}

} // namespace smx::dns
