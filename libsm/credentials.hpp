// Smart-host credentials for SMTPC's AUTH client (client.sasl_password_file,
// as postfix's smtp_sasl_password_maps): read by SMTPC at start and by
// `smx check-config`, never by the other processes.
#pragma once

#include <map>
#include <string>

namespace sm {

struct Credentials {
    std::string user;
    std::string password;
};

// Next hop as in DELIVER records (HostPort::str(), host in lower case) →
// its credentials.
using CredentialMap = std::map<std::string, Credentials>;

// Reads the file: one "nexthop user:password" per line (postfix's
// sasl_passwd format), '#' comments and blank lines ignored. The file must
// be a regular file (not a symbolic link) that neither group nor others may
// read or write, and at most max_credentials_file bytes. Throws ConfigError
// naming `key` and the line, never quoting a secret.
CredentialMap load_credentials(const std::string& key, const std::string& path);

constexpr std::size_t max_credentials_file = 1 << 20;

} // namespace sm
