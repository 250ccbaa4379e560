#include "libsm/accept.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace smx {

namespace {
constexpr auto warn_every = std::chrono::seconds(10);
} // namespace

std::shared_mutex AcceptGuard::accepting_;

int AcceptGuard::open_spare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }

AcceptGuard::AcceptGuard(std::string what, std::string refusal)
    : what_(std::move(what)), refusal_(std::move(refusal)), spare_(open_spare()) {}

AcceptGuard::~AcceptGuard() {
    if (spare_ >= 0) ::close(spare_);
}

bool AcceptGuard::on_error(int listener, const boost::system::error_code& ec) {
    warn(ec);
    const bool out_of_fds = ec.value() == EMFILE || ec.value() == ENFILE;
    if (!out_of_fds || spare_ < 0) return false;
    ::close(spare_);
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        spare_ = open_spare();
        return false;
    }
    if (!refusal_.empty())
        [[maybe_unused]] auto n = ::send(fd, refusal_.data(), refusal_.size(),
                                         MSG_DONTWAIT | MSG_NOSIGNAL);
    // The refused socket, shut down (the client gets the reply and EOF), is
    // the next spare: closing it and opening /dev/null would free its slot
    // for a moment, and another loop's accept could take it and greet a
    // client past the limit.
    ::shutdown(fd, SHUT_RDWR);
    spare_ = fd;
    ++refused_;
    return true;
}

std::chrono::milliseconds AcceptGuard::pause() {
    using std::chrono::milliseconds;
    backoff_ = backoff_.count() == 0 ? milliseconds(100) : std::min(backoff_ * 2, milliseconds(1000));
    return backoff_;
}

void AcceptGuard::warn(const boost::system::error_code& ec) {
    ++errors_since_warn_;
    const auto now = std::chrono::steady_clock::now();
    if (now - last_warn_ < warn_every) return;
    spdlog::warn("{}: accept: {} ({} times since the last report; {} clients turned away)", what_,
                 ec.message(), errors_since_warn_, refused_);
    last_warn_ = now;
    errors_since_warn_ = 0;
}

} // namespace smx
