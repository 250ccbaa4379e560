#include "smtpc/tls_sessions.hpp"

#include "libsm/panic.hpp"

#include <algorithm>

namespace smx::smtpc {
namespace {

// The key of an SSL object, owned by it (freed with it).
void free_key(void*, void* ptr, CRYPTO_EX_DATA*, int, long, void*) {
    delete static_cast<std::string*>(ptr);
}

int key_index() {
    static const int idx = SSL_get_ex_new_index(0, nullptr, nullptr, nullptr, &free_key);
    return idx;
}

// The TlsSessions of a context (not its app data: asio owns that).
int owner_index() {
    static const int idx = SSL_CTX_get_ex_new_index(0, nullptr, nullptr, nullptr, nullptr);
    return idx;
}

} // namespace

TlsSessions::TlsSessions(boost::asio::ssl::context& ctx, std::size_t max_entries)
    : ctx_(ctx.native_handle()), max_(std::max<std::size_t>(max_entries, 1)) {
    if (key_index() < 0 || owner_index() < 0) smx::fatal("OpenSSL ex_data index exhausted");
    // The client side calls the callback only with client caching on; the
    // sessions live here, not in OpenSSL's internal store.
    SSL_CTX_set_session_cache_mode(ctx_, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_set_ex_data(ctx_, owner_index(), this);
    SSL_CTX_sess_set_new_cb(ctx_, &TlsSessions::on_new_session);
}

TlsSessions::~TlsSessions() {
    SSL_CTX_sess_set_new_cb(ctx_, nullptr);
    SSL_CTX_set_ex_data(ctx_, owner_index(), nullptr);
    for (auto& [key, e] : sessions_) SSL_SESSION_free(e.session);
}

void TlsSessions::prepare(SSL* ssl, const std::string& key) {
    SSL_set_ex_data(ssl, key_index(), new std::string(key));
    const auto it = sessions_.find(key);
    if (it != sessions_.end() && SSL_SESSION_is_resumable(it->second.session))
        SSL_set_session(ssl, it->second.session);  // takes its own reference
}

void TlsSessions::forget(const std::string& key) {
    const auto it = sessions_.find(key);
    if (it == sessions_.end()) return;
    SSL_SESSION_free(it->second.session);
    sessions_.erase(it);
}

int TlsSessions::on_new_session(SSL* ssl, SSL_SESSION* s) {
    auto* self = static_cast<TlsSessions*>(SSL_CTX_get_ex_data(SSL_get_SSL_CTX(ssl), owner_index()));
    const auto* key = static_cast<const std::string*>(SSL_get_ex_data(ssl, key_index()));
    if (!self || !key) return 0;  // not ours: OpenSSL keeps its reference
    self->store(*key, s);
    return 1;  // the reference is ours now
}

void TlsSessions::store(const std::string& key, SSL_SESSION* s) {
    if (auto it = sessions_.find(key); it != sessions_.end()) {
        SSL_SESSION_free(it->second.session);
        it->second = {s, next_stamp_++};
        return;
    }
    if (sessions_.size() >= max_) {
        const auto oldest = std::min_element(
            sessions_.begin(), sessions_.end(),
            [](const auto& a, const auto& b) { return a.second.stamp < b.second.stamp; });
        SSL_SESSION_free(oldest->second.session);
        sessions_.erase(oldest);
    }
    sessions_.emplace(key, Entry{s, next_stamp_++});
}

} // namespace smx::smtpc
