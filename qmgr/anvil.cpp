#include "qmgr/anvil.hpp"

#include "libsm/panic.hpp"

namespace smx::qmgr {

using smx::msg::AnvilOp;

Anvil::Anvil(std::chrono::seconds rate_time_unit, std::size_t max_clients)
    : unit_(rate_time_unit), max_clients_(max_clients) {}

void Anvil::configure(std::chrono::seconds rate_time_unit, std::size_t max_clients) {
    unit_ = rate_time_unit;
    max_clients_ = max_clients;
}

void Anvil::expire(Time now) {
    while (!idle_.empty()) {
        const auto it = clients_.find(*idle_.front());
        if (now - it->second.touched < unit_) break;
        idle_.pop_front();
        clients_.erase(it);
    }
}

Anvil::Client& Anvil::touch(const std::string& key, Time now) {
    expire(now);
    auto [it, added] = clients_.try_emplace(key);
    Client& c = it->second;
    if (added) {
        c.window = now;
        c.idle = idle_.insert(idle_.end(), &it->first);
        if (clients_.size() > max_clients_ && idle_.front() != &it->first) {
            const auto oldest = clients_.find(*idle_.front());
            idle_.pop_front();
            clients_.erase(oldest);
            ++evicted_;
        }
    } else {
        if (now - c.window >= unit_) {
            c.window = now;
            c.conn_rate = c.mail_rate = c.rcpt_rate = 0;
        }
        if (c.connections == 0) idle_.splice(idle_.end(), idle_, c.idle);
    }
    c.touched = now;
    return c;
}

void Anvil::connect(std::uint64_t link, const std::string& key, Client& c) {
    if (c.connections++ == 0) idle_.erase(c.idle);
    ++c.conn_rate;
    ++links_[link][key];
}

void Anvil::release(const std::string& key, std::uint32_t n, Time now) {
    const auto it = clients_.find(key);
    // A client with connections is never expired nor evicted.
    if (it == clients_.end() || it->second.connections < n)
        smx::panic("anvil: releasing connections of " + key + " it does not count");
    Client& c = it->second;
    c.connections -= n;
    if (c.connections > 0) return;
    c.touched = now;
    c.idle = idle_.insert(idle_.end(), &it->first);
}

std::optional<smx::msg::AnvilReply> Anvil::handle(std::uint64_t link,
                                                   const smx::msg::AnvilRequest& r, Time now) {
    smx::msg::AnvilReply out;
    switch (r.op) {
    case AnvilOp::connect: {
        Client& c = touch(r.client, now);
        connect(link, r.client, c);
        out.connections = c.connections;
        out.rate = c.conn_rate;
        return out;
    }
    case AnvilOp::disconnect: {
        // Only what this link counted: a late or repeated one is ignored.
        const auto l = links_.find(link);
        if (l == links_.end()) return std::nullopt;
        const auto n = l->second.find(r.client);
        if (n == l->second.end()) return std::nullopt;
        if (--n->second == 0) l->second.erase(n);
        if (l->second.empty()) links_.erase(l);
        release(r.client, 1, now);
        return std::nullopt;
    }
    case AnvilOp::mail: {
        Client& c = touch(r.client, now);
        ++c.mail_rate;
        const bool mail_ok = r.mail_limit == 0 || c.mail_rate <= r.mail_limit;
        out.rcpt_granted = mail_ok && r.rcpt_limit != 0 && c.rcpt_rate < r.rcpt_limit;
        if (out.rcpt_granted) ++c.rcpt_rate;
        out.connections = c.connections;
        out.rate = c.mail_rate;
        return out;
    }
    case AnvilOp::rcpt: {
        Client& c = touch(r.client, now);
        ++c.rcpt_rate;
        out.connections = c.connections;
        out.rate = c.rcpt_rate;
        return out;
    }
    case AnvilOp::unused_rcpt: {
        // Forgotten since: nothing to give back.
        const auto it = clients_.find(r.client);
        if (it != clients_.end() && it->second.rcpt_rate > 0) --it->second.rcpt_rate;
        return std::nullopt;
    }
    }
    smx::panic("anvil: an op no case handles");
}

void Anvil::drop_link(std::uint64_t link) {
    const auto l = links_.find(link);
    if (l == links_.end()) return;
    const auto now = std::chrono::steady_clock::now();
    for (const auto& [key, n] : l->second) release(key, n, now);
    links_.erase(l);
}

std::uint32_t Anvil::connections(const std::string& client) const {
    const auto it = clients_.find(client);
    return it == clients_.end() ? 0 : it->second.connections;
}

} // namespace smx::qmgr
