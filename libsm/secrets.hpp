// The secrets `smx run` hands its children (docs/mcp.md, "Secrets"): the
// bytes of every file the config names that holds one, read by the MCP
// (mcp/secrets.cpp) with its own privileges, so that a root-only key works
// when the children run as their own accounts. Each child gets the ones it
// uses as a bundle in a sealed memfd (libsm/mcp_link.hpp) and builds its
// TLS contexts and credentials from the bytes; it never opens these paths.
//
// Bundle: "SMXS" then one field per secret, rec::Writer's TLV (u16 tag =
// Secret, u32 length, bytes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>

namespace smx {

// A new secret gets a tag here, its reader in mcp/secrets.cpp and its user.
enum class Secret : std::uint16_t {
    tls_cert = 1,            // server.tls_cert, for smx-smtps
    tls_key = 2,             // server.tls_key, for smx-smtps
    tls_ca_file = 3,         // client.tls_ca_file, for smx-smtpc
    sasl_password_file = 4,  // client.sasl_password_file, for smx-smtpc
};

// Its config key: "server.tls_key".
const char* key_of(Secret s);

// The largest file the MCP reads for it: 1 MiB, 8 MiB for a CA bundle.
std::size_t max_size(Secret s);

// Every secret at its largest, with the framing.
inline constexpr std::size_t max_bundle = 12u << 20;

class Secrets {
public:
    void set(Secret s, std::string bytes);
    bool has(Secret s) const { return items_.count(s) != 0; }
    // The bytes; a ConfigError naming the key when they were not passed
    // (a child not started by `smx run`, or a config that changed between
    // the MCP's reading and the child's).
    const std::string& at(Secret s) const;

    std::string encode() const;
    // Throws std::runtime_error on a bundle that is not one: bad magic, a
    // truncated field, an unknown or repeated tag, a secret over max_size.
    static Secrets decode(std::string_view bundle);

private:
    std::map<Secret, std::string> items_;
};

} // namespace smx
