#include "libsm/credentials.hpp"

#include "libsm/domain.hpp"

#include <algorithm>

namespace smx {
namespace {

bool space(char c) { return c == ' ' || c == '\t'; }

} // namespace

CredentialMap parse_credentials(const std::string& path, std::string_view data) {
    const std::string key = key_of(Secret::sasl_password_file);
    CredentialMap out;
    std::size_t pos = 0;
    for (unsigned lineno = 1; pos < data.size(); ++lineno) {
        const auto nl = data.find('\n', pos);
        std::string line(data.substr(pos, nl == std::string_view::npos ? data.npos : nl - pos));
        pos = nl == std::string_view::npos ? data.size() : nl + 1;
        while (!line.empty() && (space(line.back()) || line.back() == '\r')) line.pop_back();
        auto b = std::find_if_not(line.begin(), line.end(), space);
        line.erase(line.begin(), b);
        if (line.empty() || line[0] == '#') continue;
        const std::string where = path + " line " + std::to_string(lineno) + ": ";
        const auto sp = std::find_if(line.begin(), line.end(), space);
        const std::string nexthop(line.begin(), sp);
        const std::string value(std::find_if_not(sp, line.end(), space), line.end());
        const auto colon = value.find(':');
        if (value.empty() || colon == std::string::npos || colon == 0)
            throw ConfigError(key, where + "expected \"nexthop user:password\"");
        // NUL separates PLAIN's fields; CR and LF would end the command.
        if (value.find_first_of(std::string("\0\r", 2)) != std::string::npos)
            throw ConfigError(key, where + "NUL or CR in the credentials");
        HostPort hp;
        try {
            hp = parse_hostport(key, nexthop, 25);
        } catch (const ConfigError& e) {
            throw ConfigError(key, where + "bad next hop '" + nexthop + "'");
        }
        hp.host = smx::lower(hp.host);
        Credentials cred{value.substr(0, colon), value.substr(colon + 1)};
        if (!out.emplace(hp.str(), std::move(cred)).second)
            throw ConfigError(key, where + "a second entry for " + hp.str());
    }
    return out;
}

CredentialMap credentials(const ClientConfig& cfg, const Secrets& secrets) {
    if (cfg.sasl_password_file.empty()) return {};
    return parse_credentials(cfg.sasl_password_file, secrets.at(Secret::sasl_password_file));
}

} // namespace smx
