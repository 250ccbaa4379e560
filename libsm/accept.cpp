#include "accept.hpp"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>

namespace sm {

namespace {
int open_spare() { return ::open("/dev/null", O_RDONLY | O_CLOEXEC); }
constexpr auto warn_every = std::chrono::seconds(10);
} // namespace

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
    if (fd >= 0) {
        if (!refusal_.empty())
            [[maybe_unused]] auto n = ::send(fd, refusal_.data(), refusal_.size(),
                                             MSG_DONTWAIT | MSG_NOSIGNAL);
        ::close(fd);
        ++refused_;
    }
    spare_ = open_spare();
    return fd >= 0;
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

} // namespace sm
