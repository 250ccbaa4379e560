// For the fuzz targets: runs a coroutine against a real Unix socket whose
// peer has written `input` and closed its end, so that the code under test
// reads through the same LineReader as in the daemons.
#pragma once

#include "libsm/panic.hpp"

#include <boost/asio.hpp>
#include <sys/socket.h>

#include <cstdint>
#include <string_view>

namespace fuzz {

namespace asio = boost::asio;
using unix_socket = asio::local::stream_protocol::socket;

// Inputs are capped so that one write fills the socket buffer without a
// second coroutine (libFuzzer's -max_len is smaller anyway).
inline constexpr std::size_t max_input = 64 * 1024;

template <class F>
void with_stream(std::string_view input, F body) {
    asio::io_context io;
    unix_socket a(io), b(io);
    asio::local::connect_pair(a, b);
    const int size = 4 * max_input;
    ::setsockopt(a.native_handle(), SOL_SOCKET, SO_SNDBUF, &size, sizeof size);
    ::setsockopt(b.native_handle(), SOL_SOCKET, SO_RCVBUF, &size, sizeof size);
    asio::write(a, asio::buffer(input.substr(0, max_input)));
    a.shutdown(unix_socket::shutdown_send);
    asio::co_spawn(io, body(b), smx::crash_on_exception("fuzz body"));
    io.run();
}

} // namespace fuzz
