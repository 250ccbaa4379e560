#include "libsm/secrets.hpp"

#include "libsm/config.hpp"
#include "libsm/panic.hpp"
#include "libsm/record.hpp"

#include <stdexcept>

namespace smx {
namespace {

constexpr std::string_view magic = "SMXS";

bool known(std::uint16_t tag) {
    return tag >= static_cast<std::uint16_t>(Secret::tls_cert) &&
           tag <= static_cast<std::uint16_t>(Secret::sasl_password_file);
}

} // namespace

const char* key_of(Secret s) {
    switch (s) {
    case Secret::tls_cert: return "server.tls_cert";
    case Secret::tls_key: return "server.tls_key";
    case Secret::tls_ca_file: return "client.tls_ca_file";
    case Secret::sasl_password_file: return "client.sasl_password_file";
    }
    panic("secrets: unknown secret " + std::to_string(static_cast<unsigned>(s)));
}

std::size_t max_size(Secret s) {
    return s == Secret::tls_ca_file ? 8u << 20 : 1u << 20;
}

void Secrets::set(Secret s, std::string bytes) { items_[s] = std::move(bytes); }

const std::string& Secrets::at(Secret s) const {
    const auto it = items_.find(s);
    if (it == items_.end())
        throw ConfigError(key_of(s), "not passed by smx run (it reads the file for its "
                                     "children, which never open it)");
    return it->second;
}

std::string Secrets::encode() const {
    rec::Writer w;
    for (const auto& [s, bytes] : items_) w.str(static_cast<std::uint16_t>(s), bytes);
    return std::string(magic) + std::string(w.fields());
}

Secrets Secrets::decode(std::string_view bundle) {
    if (bundle.size() > max_bundle)
        throw std::runtime_error("secrets bundle of " + std::to_string(bundle.size()) +
                                 " bytes, over " + std::to_string(max_bundle));
    if (bundle.substr(0, magic.size()) != magic)
        throw std::runtime_error("not a secrets bundle (no SMXS at its start)");
    Secrets out;
    rec::FieldReader r(bundle.substr(magic.size()));
    for (rec::Field f;;) {
        const auto next = r.next(f);
        if (next == rec::FieldReader::Next::end) return out;
        if (next == rec::FieldReader::Next::truncated)
            throw std::runtime_error("secrets bundle truncated");
        if (!known(f.tag))
            throw std::runtime_error("secrets bundle: unknown secret " + std::to_string(f.tag));
        const auto s = static_cast<Secret>(f.tag);
        if (f.value.size() > max_size(s))
            throw std::runtime_error(std::string("secrets bundle: ") + key_of(s) + " over " +
                                     std::to_string(max_size(s)) + " bytes");
        if (!out.items_.emplace(s, std::string(f.value)).second)
            throw std::runtime_error(std::string("secrets bundle: ") + key_of(s) + " twice");
    }
}

} // namespace smx
