#include "mcp/secret_files.hpp"

#include "libsm/credentials.hpp"
#include "libsm/fd.hpp"
#include "libsm/tls.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace smx::mcp {
namespace {

using smx::ConfigError;
using smx::Secret;

std::string read_secret(Secret s, const std::string& path) {
    const char* key = smx::key_of(s);
    // O_NONBLOCK: a FIFO must not hang smx run (it is refused below).
    smx::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
    if (fd.get() < 0) throw ConfigError(key, "cannot read " + path + ": " + std::strerror(errno));
    struct stat st{};
    if (::fstat(fd.get(), &st) != 0)
        throw ConfigError(key, path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw ConfigError(key, path + " is not a regular file");
    if (s == Secret::sasl_password_file && (st.st_mode & 077)) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
        throw ConfigError(key, path + " is accessible by group or others (mode " + mode +
                                   "); it holds passwords: chmod 600 it");
    }
    if (static_cast<std::uint64_t>(st.st_size) > smx::max_size(s))
        throw ConfigError(key, path + " is larger than " + std::to_string(smx::max_size(s)) +
                                   " bytes");
    // Shrunk meanwhile: what is there is checked by the caller.
    std::string data;
    if (const int err = smx::read_up_to(fd.get(), static_cast<std::size_t>(st.st_size), data))
        throw ConfigError(key, "cannot read " + path + ": " + std::strerror(err));
    return data;
}

ChildSecrets read_all(const smx::Config& cfg) {
    ChildSecrets out;
    // A certificate at level none is not used, so not read.
    if (cfg.server.tls_security_level != smx::TlsLevel::none) {
        out.smtps.set(Secret::tls_cert, read_secret(Secret::tls_cert, cfg.server.tls_cert));
        out.smtps.set(Secret::tls_key, read_secret(Secret::tls_key, cfg.server.tls_key));
        smx::tls::server_context(cfg.server, out.smtps);
    }
    if (!cfg.client.tls_ca_file.empty())
        out.smtpc.set(Secret::tls_ca_file, read_secret(Secret::tls_ca_file, cfg.client.tls_ca_file));
    smx::tls::client_context(cfg.client, out.smtpc);
    if (!cfg.client.sasl_password_file.empty())
        out.smtpc.set(Secret::sasl_password_file,
                      read_secret(Secret::sasl_password_file, cfg.client.sasl_password_file));
    smx::credentials(cfg.client, out.smtpc);
    return out;
}

} // namespace

std::optional<ChildSecrets> read_secrets(const smx::Config& cfg, std::string& err) {
    try {
        return read_all(cfg);
    } catch (const ConfigError& e) {
        err = e.what();
        return std::nullopt;
    }
}

} // namespace smx::mcp
