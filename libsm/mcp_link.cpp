#include "libsm/mcp_link.hpp"

#include "libsm/fd.hpp"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <utility>

namespace smx {
namespace {

constexpr int required_seals = F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK;

std::runtime_error error(const std::string& what) {
    return std::runtime_error(what + ": " + std::strerror(errno));
}

// The whole memfd, which must be sealed: nobody can change it while it is read.
std::string read_sealed(int fd) {
    const int seals = ::fcntl(fd, F_GET_SEALS);
    struct stat st{};
    if (seals < 0 || (seals & required_seals) != required_seals || ::fstat(fd, &st) != 0 ||
        !S_ISREG(st.st_mode))
        throw std::runtime_error("the secrets from smx run are not in a sealed memfd");
    if (static_cast<std::uint64_t>(st.st_size) > max_bundle)
        throw std::runtime_error("secrets bundle of " + std::to_string(st.st_size) +
                                 " bytes, over " + std::to_string(max_bundle));
    std::string data(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t got = 0;
    while (got < data.size()) {
        // pread: the memfd's offset is not ours alone.
        const ssize_t n = ::pread(fd, data.data() + got, data.size() - got,
                                  static_cast<off_t>(got));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw error("reading the secrets memfd");
        if (n == 0) throw std::runtime_error("the secrets memfd ended early");
        got += static_cast<std::size_t>(n);
    }
    return data;
}

} // namespace

McpLink McpLink::from_env() {
    const char* v = std::getenv("SMX_MCP_FD");
    if (!v || !*v) return {};
    char* end = nullptr;
    const long fd = std::strtol(v, &end, 10);
    int type = 0;
    socklen_t len = sizeof type;
    if (*end || fd < 3 || fd > INT_MAX ||
        ::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
        type != SOCK_SEQPACKET)
        throw std::runtime_error(std::string("SMX_MCP_FD=") + v +
                                 " is not the link to smx run (a SOCK_SEQPACKET socket)");
    // Nothing this process starts inherits it.
    ::fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
    return McpLink(static_cast<int>(fd));
}

McpLink::McpLink(McpLink&& o) noexcept
    : fd_(std::exchange(o.fd_, -1)), secrets_(std::move(o.secrets_)) {}

McpLink& McpLink::operator=(McpLink&& o) noexcept {
    std::swap(fd_, o.fd_);
    std::swap(secrets_, o.secrets_);
    return *this;
}

McpLink::~McpLink() {
    if (fd_ >= 0) ::close(fd_);
}

const Secrets& McpLink::take_secrets() {
    if (fd_ < 0) return secrets_;
    Fd newest;
    for (;;) {
        char text[16];
        iovec iov{text, sizeof text};
        alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
        msghdr m{};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = control;
        m.msg_controllen = sizeof control;
        const ssize_t n = ::recvmsg(fd_, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (n < 0) throw error("reading the link to smx run");
        if (n == 0) break;  // smx run is gone
        const cmsghdr* c = CMSG_FIRSTHDR(&m);
        if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
            c->cmsg_len != CMSG_LEN(sizeof(int)))
            throw std::runtime_error("a message from smx run without its secrets memfd");
        int fd;
        std::memcpy(&fd, CMSG_DATA(c), sizeof fd);
        newest = Fd(fd);
        if (std::string_view(text, static_cast<std::size_t>(n)) != link_secrets)
            throw std::runtime_error("a message from smx run that is not its secrets");
    }
    if (newest) secrets_ = Secrets::decode(read_sealed(newest.get()));
    return secrets_;
}

void McpLink::ready() const { send(link_ready); }

void McpLink::cannot_start(std::string_view why) const {
    std::string msg(link_cannot_start);
    msg += why.substr(0, max_link_message - msg.size());
    send(msg);
}

void McpLink::send(std::string_view msg) const {
    // Never waits: a report smx run cannot take is lost, the child goes on.
    if (fd_ >= 0) ::send(fd_, msg.data(), msg.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

} // namespace smx
