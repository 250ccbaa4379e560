#include "libsm/channel.hpp"

#include "libsm/await.hpp"
#include <boost/asio/experimental/awaitable_operators.hpp>
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>

namespace smx {

Channel::Channel(unix_socket s, std::string peer)
    : sock_(std::move(s)), peer_(std::move(peer)), wake_(sock_.get_executor()), rbuf_(65536, '\0') {
    wake_.expires_at(asio::steady_timer::time_point::max());
}

void Channel::start() {
    asio::co_spawn(sock_.get_executor(),
                   [self = shared_from_this()] { return self->writer(); },
                   crash_on_exception("channel writer"));
}

asio::awaitable<std::optional<rec::Frame>> Channel::read() {
    // Frames are parsed out of a read buffer, so a burst of records costs one
    // read(2) rather than two per record.
    for (;;) {
        const std::string_view avail(rbuf_.data() + rpos_, rend_ - rpos_);
        if (skipping_) {
            const std::size_t n = std::min<std::size_t>(skip_, avail.size());
            rpos_ += n;
            skip_ -= n;
            if (skip_ == 0) {
                const rec::Header h = *skipping_;
                skipping_.reset();
                spdlog::error("{}: record type {} of {} bytes is over the limit of {}; refused",
                              peer_, h.type, h.length, rec::max_body);
                co_return rec::Frame{h, {}, true};
            }
        } else if (avail.size() >= rec::header_size) {
            const rec::Header h = rec::parse_header_unchecked(avail);
            if (h.length > rec::max_skip) {
                spdlog::error("{}: protocol error: frame length {} (stream out of step)", peer_,
                              h.length);
                close();
                co_return std::nullopt;
            }
            if (h.length > rec::max_body) {
                skipping_ = h;
                skip_ = h.length;
                rpos_ += rec::header_size;
                continue;
            }
            if (avail.size() >= rec::header_size + h.length) {
                rec::Frame f{h, std::string(avail.substr(rec::header_size, h.length))};
                rpos_ += rec::header_size + h.length;
                co_return f;
            }
        }
        // Not resized per read: that zero-filled 64 KiB each time.
        if (rpos_ > 0) {
            std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
            rend_ -= rpos_;
            rpos_ = 0;
        }
        if (rend_ == rbuf_.size()) rbuf_.resize(2 * rbuf_.size());
        auto [ec, n] = co_await sock_.async_read_some(
            asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
            smx::await_tuple);
        const bool partial = rend_ > 0;
        rend_ += n;
        if (ec) {
            if (partial && ec == asio::error::eof)
                spdlog::error("{}: truncated frame at end of stream", peer_);
            else if (ec != asio::error::eof && ec != asio::error::operation_aborted && open_)
                spdlog::warn("{}: read: {}", peer_, ec.message());
            close();
            co_return std::nullopt;
        }
    }
}

void Channel::send(std::string frame) {
    if (!open_) return;
    queued_bytes_ += frame.size();
    outq_.push_back(std::move(frame));
    wake_.cancel_one();
}

void Channel::close() {
    if (!open_) return;
    open_ = false;
    boost::system::error_code ec;
    sock_.shutdown(unix_socket::shutdown_both, ec);
    sock_.close(ec);
    wake_.cancel();
}

asio::awaitable<void> Channel::writer() {
    auto self = shared_from_this();
    std::string batch;
    while (open_) {
        if (outq_.empty()) {
            co_await wake_.async_wait(smx::await_tuple);
            continue;
        }
        batch.clear();
        while (!outq_.empty() && batch.size() < (1u << 20)) {
            batch += outq_.front();
            queued_bytes_ -= outq_.front().size();
            outq_.pop_front();
        }
        auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(batch),
                                                  smx::await_tuple);
        if (ec) {
            if (open_) spdlog::warn("{}: write: {}", peer_, ec.message());
            close();
        }
    }
}

asio::awaitable<std::shared_ptr<Channel>> connect_qmgr(const std::string& path,
                                                       const std::string& role,
                                                       std::string& err) {
    unix_socket s(co_await asio::this_coro::executor);
    auto [ec] = co_await s.async_connect(asio::local::stream_protocol::endpoint(path),
                                         smx::await_tuple);
    if (ec) {
        err = "connect " + path + ": " + ec.message();
        co_return nullptr;
    }
    auto ch = std::make_shared<Channel>(std::move(s), "qmgr");
    ch->start();
    ch->send(msg::encode(msg::Hello{role, msg::protocol_version,
                                    static_cast<std::uint32_t>(::getpid())}));
    auto f = co_await ch->read();
    if (!f) {
        err = "qmgr closed the connection during HELLO";
        co_return nullptr;
    }
    auto ack = msg::decode<msg::HelloAck>(*f, err);
    if (!ack) co_return nullptr;
    if (ack->status != 0) {
        err = "qmgr refused: " + ack->text;
        ch->close();
        co_return nullptr;
    }
    co_return ch;
}

asio::awaitable<std::optional<rec::Frame>> read_within(Channel& ch, std::chrono::seconds limit) {
    using namespace asio::experimental::awaitable_operators;
    asio::steady_timer t(co_await asio::this_coro::executor, limit);
    auto r = co_await (ch.read() || t.async_wait(asio::use_awaitable));
    if (r.index() == 0) co_return std::get<0>(std::move(r));
    spdlog::warn("{}: no record within {}s, closing", ch.peer(), limit.count());
    ch.close();
    co_return std::nullopt;
}

std::optional<msg::CtlReply> ctl_call(const std::string& path,
                                      const msg::CtlRequest& req, std::string& err) {
    asio::io_context io;
    std::optional<msg::CtlReply> out;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto ch = co_await connect_qmgr(path, "cli", err);
        if (!ch) co_return;
        ch->send(msg::encode(req, 1));
        auto f = co_await ch->read();
        if (!f) {
            err = "qmgr closed the connection";
        } else {
            out = msg::decode<msg::CtlReply>(*f, err);
        }
        ch->close();
    }, crash_on_exception("ctl_call"));
    io.run_for(std::chrono::seconds(30));
    if (!out && err.empty()) err = "timed out waiting for qmgr";
    return out;
}

} // namespace smx
