// One SMTP server session (RFC 5321), a coroutine that reads like the
// protocol: greeting, then commands until QUIT, timeout or error.
#pragma once

#include <boost/asio.hpp>
#include <string>

namespace smx::smtps {

class Server;

boost::asio::awaitable<void> run_session(Server& srv, boost::asio::ip::tcp::socket sock,
                                         std::string ip, bool trusted);

} // namespace smx::smtps
