// The one place that reads secrets (docs/mcp.md, "Secrets"): every file the
// config names that holds one, read by `smx run` (and `smx check-config`,
// `smx reload`) with its own privileges, so that a root:root 0600 key works
// when the children run as their own accounts, as postfix and OpenSMTPD read
// theirs before giving up root. Each child gets what it uses and never opens
// the paths: SMTPS the certificate and key, SMTPC the CA bundle and the SASL
// passwords, QMGR nothing.
#pragma once

#include "libsm/config.hpp"
#include "libsm/secrets.hpp"

#include <optional>
#include <string>

namespace smx::mcp {

struct ChildSecrets {
    smx::Secrets smtps, smtpc;
    smx::Secrets pickup;  // none: its link carries its start reports only
};

// Reads the secrets cfg uses, following symbolic links (the paths are the
// administrator's: certbot's live/ are links), each a regular file within
// smx::max_size before a byte is read, the SASL password file private to its
// owner (mode 0600 or stricter). Then checks them with the code the children
// use (smx::tls::server_context, client_context, smx::credentials), so that a
// key that does not match, a bad CA bundle or a malformed password file
// fails here. nullopt with err "<key>: <what>" naming the file.
std::optional<ChildSecrets> read_secrets(const smx::Config& cfg, std::string& err);

} // namespace smx::mcp
