#include "mcp/child_link.hpp"

#include "libsm/mcp_link.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace smx::mcp {
namespace {

std::string errno_text() { return std::strerror(errno); }

// A memfd holding bytes, sealed against every change: the child may read it
// without fearing that it changes underneath. -1 with err.
smx::Fd sealed(const std::string& bytes, std::string& err) {
    smx::Fd fd(::memfd_create("smx-secrets", MFD_CLOEXEC | MFD_ALLOW_SEALING));
    if (fd.get() < 0) {
        err = "memfd_create: " + errno_text();
        return fd;
    }
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd.get(), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            err = "writing the secrets memfd: " + errno_text();
            return smx::Fd();
        }
        done += static_cast<std::size_t>(n);
    }
    if (::fcntl(fd.get(), F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) !=
        0) {
        err = "sealing the secrets memfd: " + errno_text();
        return smx::Fd();
    }
    return fd;
}

} // namespace

bool ChildLink::open(std::string& err) {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0) {
        err = "socketpair: " + errno_text();
        return false;
    }
    mcp_ = smx::Fd(fds[0]);
    child_ = smx::Fd(fds[1]);
    ready_ = false;
    why_.clear();
    return true;
}

ssize_t send_with_fd(int sock, std::string_view text, int fd) {
    iovec iov{const_cast<char*>(text.data()), text.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
    ssize_t n;
    do {
        n = ::sendmsg(sock, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    return n;
}

bool ChildLink::send(const smx::Secrets& secrets, std::string& err) {
    const smx::Fd memfd = sealed(secrets.encode(), err);
    if (memfd.get() < 0) return false;
    if (send_with_fd(mcp_.get(), smx::link_secrets, memfd.get()) < 0) {
        err = "passing the secrets: " + errno_text();
        return false;
    }
    return true;
}

void ChildLink::read_reports() {
    if (!mcp_) return;
    // A child that floods the link gets no more than these looked at.
    for (int i = 0; i < 16; ++i) {
        char buf[smx::max_link_message];
        // No room for control data: fds a child tries to pass are closed
        // by the kernel.
        const ssize_t n = ::recv(mcp_.get(), buf, sizeof buf, MSG_DONTWAIT);
        // ECONNRESET: the child went without taking all its secrets; said
        // once, what it sent is still there.
        if (n < 0 && (errno == EINTR || errno == ECONNRESET)) continue;
        if (n <= 0) return;
        const std::string_view msg(buf, static_cast<std::size_t>(n));
        if (msg == smx::link_ready) {
            ready_ = true;
        } else if (msg.substr(0, smx::link_cannot_start.size()) == smx::link_cannot_start) {
            why_ = msg.substr(smx::link_cannot_start.size());
            for (char& ch : why_)
                if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
        }
    }
}

} // namespace smx::mcp
