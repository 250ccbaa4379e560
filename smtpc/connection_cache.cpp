#include "smtpc/connection_cache.hpp"

#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

namespace smx::smtpc {
namespace {

// QUIT on a session nobody else holds: the coroutine keeps it, and the
// settings it was made with, alive.
asio::awaitable<void> quit_and_keep(std::shared_ptr<Session> s, std::shared_ptr<const void>) {
    co_await s->quit();
}

} // namespace

std::shared_ptr<Session> ConnectionCache::take(const std::string& dest) {
    for (;;) {
        auto it = idle_.find(dest);
        if (it == idle_.end()) return nullptr;
        // Most recently used first: it is the least likely to have timed out.
        auto s = std::move(it->second.back());
        it->second.pop_back();
        if (it->second.empty()) idle_.erase(it);
        ++s->idle_gen;
        boost::system::error_code ec;
        s->socket().cancel(ec);
        s->idle_timer().cancel();
        if (!s->has_unread()) return s;
        spdlog::warn("{}: unexpected data on idle connection; closing it", s->relay());
        s->close();
    }
}

void ConnectionCache::put(const std::string& dest, std::shared_ptr<Session> s) {
    if (!s->usable()) return;
    // E.g. a reply line after the end-of-data reply: the next transaction
    // would read it as its own (replies out of step). Such bytes still on
    // the socket end the idle watch below at once.
    auto out_of_step = [](const std::shared_ptr<Session>& s) {
        spdlog::warn("{}: unexpected data after the transaction; closing the connection",
                     s->relay());
        s->close();
    };
    if (s->has_buffered()) return out_of_step(s);
    if (s->transactions() >= cfg_->max_msgs_per_connection) {
        asio::co_spawn(s->socket().get_executor(), quit_and_keep(s, keep_),
                       smx::crash_on_exception("smtpc quit"));
        return;
    }
    const auto gen = ++s->idle_gen;
    idle_[dest].push_back(s);
    // The server speaking or closing while we are idle ends the session
    // (typically its own idle timeout: 421 or EOF).
    s->watch_idle([this, dest, s, gen, out_of_step](Session::IdleEnd end) {
        if (end == Session::IdleEnd::cancelled || s->idle_gen != gen) return;
        remove(dest, s);
        if (end == Session::IdleEnd::data) return out_of_step(s);
        spdlog::debug("{}: idle connection closed by server", s->relay());
        s->close();
    });
    s->idle_timer().expires_after(cfg_->idle_timeout);
    s->idle_timer().async_wait([this, dest, s, gen](boost::system::error_code ec) {
        if (ec || s->idle_gen != gen) return;
        remove(dest, s);
        ++s->idle_gen;
        boost::system::error_code ignored;
        s->socket().cancel(ignored);
        asio::co_spawn(s->socket().get_executor(), quit_and_keep(s, keep_),
                       smx::crash_on_exception("smtpc quit"));
    });
}

void ConnectionCache::remove(const std::string& dest, const std::shared_ptr<Session>& s) {
    auto it = idle_.find(dest);
    if (it == idle_.end()) return;
    std::erase(it->second, s);
    if (it->second.empty()) idle_.erase(it);
}

void ConnectionCache::close_all() {
    for (auto& [dest, list] : idle_) {
        for (auto& s : list) {
            ++s->idle_gen;
            s->idle_timer().cancel();
            s->close();
        }
    }
    idle_.clear();
}

void ConnectionCache::reload(std::shared_ptr<const void> keep, const smx::ClientConfig& cfg) {
    close_all();
    keep_ = std::move(keep);
    cfg_ = &cfg;
}

std::size_t ConnectionCache::idle() const {
    std::size_t n = 0;
    for (const auto& [dest, list] : idle_) n += list.size();
    return n;
}

} // namespace smx::smtpc
