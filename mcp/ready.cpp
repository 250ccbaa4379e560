#include "mcp/ready.hpp"

#include "libsm/await.hpp"
#include "libsm/channel.hpp"
#include "libsm/panic.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>

#include <boost/asio.hpp>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>

namespace smx::mcp {
namespace asio = boost::asio;
using asio::ip::tcp;
using namespace std::chrono_literals;

namespace {

std::optional<tcp::endpoint> probe_endpoint(int listen_fd) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    if (::getsockname(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return {};
    if (ss.ss_family == AF_INET) {
        const auto& a = reinterpret_cast<const sockaddr_in&>(ss);
        auto v4 = asio::ip::address_v4(ntohl(a.sin_addr.s_addr));
        if (v4.is_unspecified()) v4 = asio::ip::address_v4::loopback();
        return tcp::endpoint(v4, ntohs(a.sin_port));
    }
    if (ss.ss_family == AF_INET6) {
        const auto& a = reinterpret_cast<const sockaddr_in6&>(ss);
        asio::ip::address_v6::bytes_type b;
        std::memcpy(b.data(), a.sin6_addr.s6_addr, b.size());
        auto v6 = asio::ip::address_v6(b);
        if (v6.is_unspecified()) v6 = asio::ip::address_v6::loopback();
        return tcp::endpoint(v6, ntohs(a.sin6_port));
    }
    return {};
}

// Runs probe on io until it ends, a second has passed, or a signal of wake
// is pending.
void run_probe(asio::io_context& io, const sigset_t& wake, std::string_view what,
               std::function<asio::awaitable<void>()> probe) {
    // Readable while such a signal is pending; never read, so it stays so.
    const int sfd = ::signalfd(-1, &wake, SFD_NONBLOCK | SFD_CLOEXEC);
    if (sfd < 0) smx::panic(std::string("signalfd: ") + std::strerror(errno));
    asio::posix::stream_descriptor signals(io, sfd);
    signals.async_wait(asio::posix::stream_descriptor::wait_read,
                       [&](boost::system::error_code ec) {
                           if (!ec) io.stop();
                       });
    asio::co_spawn(io, std::move(probe), [&, what](std::exception_ptr e) {
        smx::crash_on_exception(what)(e);
        io.stop();
    });
    io.run_for(1s);
}

} // namespace

bool qmgr_answers(const std::string& path, const sigset_t& wake) {
    asio::io_context io;
    bool ok = false;
    run_probe(io, wake, "qmgr probe", [&]() -> asio::awaitable<void> {
        std::string err;
        if (auto ch = co_await smx::connect_qmgr(path, "cli", err)) {
            ok = true;
            ch->close();
        }
    });
    return ok;
}

bool smtp_greets(int listen_fd, const sigset_t& wake) {
    const auto ep = probe_endpoint(listen_fd);
    if (!ep) return false;
    asio::io_context io;
    bool ok = false;
    run_probe(io, wake, "smtp probe", [&]() -> asio::awaitable<void> {
        tcp::socket sock(io);
        auto [cec] = co_await sock.async_connect(*ep, smx::await_tuple);
        if (cec) co_return;
        std::string line;
        auto [rec, n] = co_await asio::async_read_until(
            sock, asio::dynamic_buffer(line, 512), '\n', smx::await_tuple);
        if (rec || line.rfind("220", 0) != 0) co_return;
        ok = true;
        co_await asio::async_write(sock, asio::buffer("QUIT\r\n", 6),
                                   smx::await_tuple);
    });
    return ok;
}

void notify_service(const std::string& state) {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    if (!socket || !*socket) return;
    if (const int rc = ::sd_notify(0, state.c_str()); rc < 0)
        spdlog::warn("cannot notify the service manager at {} ({}): {}", socket,
                     state.substr(0, state.find('\n')), std::strerror(-rc));
}

} // namespace smx::mcp
