#include "startup.hpp"

#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

namespace smx {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

bool make_dir(const std::string& path, std::string& err) {
    std::error_code ec;
    fs::create_directories(path, ec);
    if (ec) {
        err = "cannot create " + path + ": " + ec.message();
        return false;
    }
    if (!fs::is_directory(path, ec)) {
        err = path + " exists and is not a directory";
        return false;
    }
    return true;
}

// The whole tree, so that files a root-run left behind stay usable.
bool give_tree(const std::string& root, const RunAs& run_as, std::string& err) {
    if (!give_to(root, run_as, err)) return false;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
        if (!give_to(it->path().string(), run_as, err)) return false;
    }
    if (ec) {
        err = "cannot walk " + root + ": " + ec.message();
        return false;
    }
    return true;
}

} // namespace

std::optional<RunAs> lookup_run_as(const sm::Config& cfg, std::string& err) {
    if (cfg.server.user.empty() || ::geteuid() != 0) return std::nullopt;
    const passwd* pw = ::getpwnam(cfg.server.user.c_str());
    if (!pw) {
        err = "server.user: no such user '" + cfg.server.user + "'";
        return std::nullopt;
    }
    RunAs r{cfg.server.user, pw->pw_uid, pw->pw_gid, {}};
    int n = 16;
    for (;;) {
        r.groups.resize(static_cast<std::size_t>(n));
        const int want = n;
        if (::getgrouplist(r.name.c_str(), r.gid, r.groups.data(), &n) >= 0) break;
        if (n <= want) n = want * 2;  // some libcs do not report the size needed
    }
    r.groups.resize(static_cast<std::size_t>(n));
    return r;
}

bool give_to(const std::string& path, const RunAs& run_as, std::string& err) {
    struct stat st;
    if (::lstat(path.c_str(), &st) != 0) {
        err = "cannot stat " + path + ": " + errno_text();
        return false;
    }
    if (st.st_uid == run_as.uid && st.st_gid == run_as.gid) return true;
    if (::lchown(path.c_str(), run_as.uid, run_as.gid) != 0) {
        err = "cannot give " + path + " to " + run_as.name + ": " + errno_text();
        return false;
    }
    return true;
}

bool make_dirs(const sm::Config& cfg, const std::optional<RunAs>& run_as, std::string& err) {
    const std::string spool = cfg.spool_dir_abs();
    std::vector<std::string> dirs{spool, spool + "/cdb", spool + "/ibdb", spool + "/defedb",
                                  spool + "/quarantine", cfg.run_dir_abs()};
    if (cfg.queue.cdb_hashed) {
        // The same upper-case hex names as sm::cdb_path().
        static const char hex[] = "0123456789ABCDEF";
        for (int i = 0; i < 256; ++i)
            dirs.push_back(spool + "/cdb/" + hex[i >> 4] + hex[i & 15]);
    }
    for (const auto& d : dirs)
        if (!make_dir(d, err)) return false;
    if (!run_as) return true;
    return give_tree(spool, *run_as, err) && give_tree(cfg.run_dir_abs(), *run_as, err);
}

PidLock::~PidLock() {
    if (fd_ < 0) return;
    // Unlink while still holding the lock: a new smx run can not lock the
    // old inode in between.
    ::unlink(path_.c_str());
    ::close(fd_);
}

bool PidLock::acquire(const std::string& path, std::string& err) {
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        err = "cannot open " + path + ": " + errno_text();
        return false;
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        const bool busy = errno == EWOULDBLOCK;
        err = busy ? "another smx run is using " + fs::path(path).parent_path().string()
                   : "cannot lock " + path + ": " + errno_text();
        char buf[32] = {};
        if (busy && ::read(fd, buf, sizeof buf - 1) > 0)
            err += " (pid " + std::string(buf, std::strcspn(buf, "\n")) + ")";
        ::close(fd);
        return false;
    }
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::write(fd, pid.data(), pid.size()) != static_cast<ssize_t>(pid.size())) {
        err = "cannot write " + path + ": " + errno_text();
        ::close(fd);
        return false;
    }
    path_ = path;
    fd_ = fd;
    return true;
}

Listeners::~Listeners() {
    for (int fd : fds_) ::close(fd);
}

bool Listeners::open(const std::vector<sm::HostPort>& addrs, std::string& err) {
    for (const auto& hp : addrs) {
        const std::string where = "cannot listen on " + hp.str() + ": ";
        addrinfo hints{};
        hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV | (hp.literal ? AI_NUMERICHOST : 0);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        addrinfo* res = nullptr;
        const std::string port = std::to_string(hp.port);
        if (const int rc = ::getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res)) {
            err = where + ::gai_strerror(rc);
            return false;
        }
        std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> guard(res, ::freeaddrinfo);
        const int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            err = where + errno_text();
            return false;
        }
        fds_.push_back(fd);
        const int on = 1;
        ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);
        // "[::]:25" next to "0.0.0.0:25" must not collide.
        if (res->ai_family == AF_INET6) ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on);
        if (::bind(fd, res->ai_addr, res->ai_addrlen) != 0 || ::listen(fd, 1024) != 0) {
            err = where + errno_text();
            return false;
        }
    }
    return true;
}

} // namespace smx
