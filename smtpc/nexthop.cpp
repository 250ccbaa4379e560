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

// Every address of the local interfaces (what a wildcard listen means).
std::vector<asio::ip::address> interface_addresses() {
    std::vector<asio::ip::address> out;
    ifaddrs* ifa = nullptr;
    if (::getifaddrs(&ifa) != 0) return out;
    for (auto* i = ifa; i; i = i->ifa_next) {
        if (auto a = smx::dns::to_address(i->ifa_addr)) out.push_back(*a);
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

asio::awaitable<Targets> Resolver::addresses(const std::string& host, std::uint16_t port,
                                             Role role) {
    Targets t;
    const smx::dns::Answer a = co_await dns_.lookup(smx::dns::Kind::addr, host);
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
    smx::dns::Answer mx = co_await dns_.lookup(smx::dns::Kind::mx, domain);
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
