// Smart-host credentials for SMTPC's AUTH client (client.sasl_password_file,
// as postfix's smtp_sasl_password_maps): the file is read by `smx run` and
// `smx check-config` (mcp/secrets.cpp), which pass its bytes to SMTPC alone
// (libsm/secrets.hpp); both parse them here.
#pragma once

#include "libsm/config.hpp"
#include "libsm/secrets.hpp"

#include <map>
#include <string>
#include <string_view>

namespace smx {

struct Credentials {
    std::string user;
    std::string password;
};

// Next hop as in DELIVER records (HostPort::str(), host in lower case) →
// its credentials.
using CredentialMap = std::map<std::string, Credentials>;

// Parses the bytes of the file: one "nexthop user:password" per line
// (postfix's sasl_passwd format), '#' comments and blank lines ignored.
// Throws ConfigError naming client.sasl_password_file, the file (path) and
// the line, never quoting a secret.
CredentialMap parse_credentials(const std::string& path, std::string_view data);

// client.sasl_password_file's credentials from the bytes `smx run` passed
// (Secret::sasl_password_file); none when the key is empty.
CredentialMap credentials(const ClientConfig& cfg, const Secrets& secrets);

} // namespace smx
