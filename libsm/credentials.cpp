#include "credentials.hpp"

#include "config.hpp"
#include "domain.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace sm {
namespace {

std::string read_private_file(const std::string& key, const std::string& path) {
    // O_NOFOLLOW: a symbolic link could point anywhere; O_NONBLOCK: a FIFO
    // must not hang the reader (it is refused below).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) {
        if (errno == ELOOP) throw ConfigError(key, path + " is a symbolic link, not a regular file");
        throw ConfigError(key, "cannot read " + path + ": " + std::strerror(errno));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st{};
    if (::fstat(fd, &st) != 0) throw ConfigError(key, path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw ConfigError(key, path + " is not a regular file");
    if (st.st_mode & 077) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw ConfigError(key, path + " is accessible by group or others (mode " + mode +
                                   "); it holds passwords: chmod 600 it");
    }
    if (static_cast<std::uint64_t>(st.st_size) > max_credentials_file)
        throw ConfigError(key, path + " is larger than " + std::to_string(max_credentials_file) +
                                   " bytes");
    std::string data(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < data.size()) {
        const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw ConfigError(key, path + ": " + std::strerror(errno));
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    data.resize(got);
    return data;
}

bool space(char c) { return c == ' ' || c == '\t'; }

} // namespace

CredentialMap load_credentials(const std::string& key, const std::string& path) {
    const std::string data = read_private_file(key, path);
    CredentialMap out;
    std::size_t pos = 0;
    for (unsigned lineno = 1; pos < data.size(); ++lineno) {
        const auto nl = data.find('\n', pos);
        std::string line = data.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
        pos = nl == std::string::npos ? data.size() : nl + 1;
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
        hp.host = sm::lower(hp.host);
        Credentials cred{value.substr(0, colon), value.substr(colon + 1)};
        if (!out.emplace(hp.str(), std::move(cred)).second)
            throw ConfigError(key, where + "a second entry for " + hp.str());
    }
    return out;
}

} // namespace sm
