// A record channel over a Unix stream socket: one reader (the owner's
// coroutine calls read()) and one writer coroutine that drains the send
// queue, so many records leave in one write.
#pragma once

#include "libsm/messages.hpp"
#include "libsm/record.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>

namespace smx {

namespace asio = boost::asio;
using unix_socket = asio::local::stream_protocol::socket;

class Channel : public std::enable_shared_from_this<Channel> {
public:
    explicit Channel(unix_socket s, std::string peer = "peer");

    // Starts the writer coroutine; call once after construction.
    void start();
    // Next frame, or nullopt on EOF or I/O error, or when a frame's length
    // is beyond rec::max_skip (the stream is out of step: logged, closed).
    // A frame over rec::max_body is read past and returned with oversize
    // set and no body: the caller refuses that request and reads on.
    asio::awaitable<std::optional<rec::Frame>> read();
    // Queues a frame for the writer. Dropped silently once closed.
    void send(std::string frame);
    void close();
    bool is_open() const { return open_; }
    std::size_t queued_bytes() const { return queued_bytes_; }
    const std::string& peer() const { return peer_; }
    void set_peer(std::string p) { peer_ = std::move(p); }

private:
    asio::awaitable<void> writer();

    unix_socket sock_;
    std::string peer_;
    asio::steady_timer wake_;
    std::deque<std::string> outq_;
    // Bytes [rpos_, rend_) of rbuf_ are read and not yet parsed. rbuf_ keeps
    // its size (zero-filled once) and grows only for a frame larger than it.
    std::string rbuf_;
    std::size_t rpos_ = 0;
    std::size_t rend_ = 0;
    // An oversize frame being read past, and how many of its bytes remain.
    std::optional<rec::Header> skipping_;
    std::size_t skip_ = 0;
    std::size_t queued_bytes_ = 0;
    bool open_ = true;
};

// The next frame, as Channel::read, within limit: on timeout (logged) the
// channel is closed and nullopt comes back.
asio::awaitable<std::optional<rec::Frame>> read_within(Channel& ch, std::chrono::seconds limit);

// Connects to QMGR's socket and exchanges HELLO. Returns null (with the
// reason in err) when the socket is absent or QMGR refuses us.
asio::awaitable<std::shared_ptr<Channel>> connect_qmgr(const std::string& path,
                                                       const std::string& role,
                                                       std::string& err);

// Blocking variant for the CLI: sends one CTL request and waits for the reply.
std::optional<msg::CtlReply> ctl_call(const std::string& path,
                                      const msg::CtlRequest& req, std::string& err);

} // namespace smx
