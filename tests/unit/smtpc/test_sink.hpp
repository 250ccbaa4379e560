// A small scriptable SMTP server on 127.0.0.1 for the SMTPC tests: records
// what it receives (envelope, data as on the wire and unstuffed) and can be
// told to reject, hang or close at chosen points.
#pragma once

#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"

#include <boost/asio.hpp>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

struct Received {
    std::string sender;
    std::vector<std::string> rcpts;
    std::string wire;  // DATA lines as sent, CRLF-terminated, without the final "."
    std::string data;  // after dot-unstuffing
};

class Sink {
public:
    explicit Sink(asio::io_context& io) : acc_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
        asio::co_spawn(io, accept_loop(), smx::crash_on_exception("test sink: accept"));
    }
    std::uint16_t port() const { return acc_.local_endpoint().port(); }
    std::string nexthop() const { return "[127.0.0.1]:" + std::to_string(port()); }

    // Behaviour.
    bool pipelining = true;
    std::map<std::string, std::string> rcpt_reply;  // address → reply line
    std::string mail_reply = "250 2.1.0 Ok";
    std::string final_reply = "250 2.0.0 Ok: queued";
    // When a command starting with `fault_on` arrives (the n-th time,
    // counting from 1): "hang" (say nothing), "close", or a reply line
    // (a 421 reply also closes).
    std::string fault_on;
    int fault_nth = 1;
    std::string fault_action;
    bool close_after_message = false;

    // Observations.
    int connections = 0;
    int rsets = 0;
    int quits = 0;
    bool saw_pipelined = false;
    std::vector<Received> msgs;
    std::vector<std::string> commands;

private:
    asio::awaitable<void> accept_loop() {
        for (;;) {
            auto [ec, s] = co_await acc_.async_accept(asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;
            ++connections;
            s.set_option(tcp::no_delay(true));
            asio::co_spawn(acc_.get_executor(), session(std::make_shared<tcp::socket>(std::move(s))),
                           smx::crash_on_exception("test sink: session"));
        }
    }

    static std::string between(const std::string& s) {
        const auto a = s.find('<'), b = s.find('>');
        if (a == std::string::npos || b == std::string::npos || b < a) return {};
        return s.substr(a + 1, b - a - 1);
    }

    asio::awaitable<void> session(std::shared_ptr<tcp::socket> s) {
        smx::smtp::LineReader<tcp::socket> r(*s);
        auto say = [&](std::string line) -> asio::awaitable<bool> {
            line += "\r\n";
            co_return co_await smx::smtp::write_all(*s, line, 5s);
        };
        bool ok = co_await say("220 sink ESMTP");  // (GCC 12: no co_await in conditions)
        if (!ok) co_return;
        Received cur;
        bool have_mail = false;
        std::map<std::string, int> seen;
        for (;;) {
            auto l = co_await r.read_line(30s);
            if (l.status != smx::smtp::ReadStatus::ok) co_return;
            const std::string line(l.text);
            commands.push_back(line);
            std::string verb = line.substr(0, line.find_first_of(" :"));
            for (auto& c : verb) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
            if (!fault_on.empty() && line.rfind(fault_on, 0) == 0 &&
                ++seen[fault_on] == fault_nth) {
                if (fault_action == "hang") {
                    asio::steady_timer t(acc_.get_executor(), 60s);
                    co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
                    co_return;
                }
                if (fault_action != "close") {
                    co_await say(fault_action);
                }
                s->close();
                co_return;
            }
            if (verb == "EHLO") {
                co_await say(std::string("250-sink\r\n") + (pipelining ? "250-PIPELINING\r\n" : "") +
                             "250-SIZE 100000000\r\n250 8BITMIME");
            } else if (verb == "HELO" || verb == "NOOP") {
                co_await say("250 sink");
            } else if (verb == "MAIL") {
                if (r.buffered() > 0) saw_pipelined = true;
                cur = {};
                cur.sender = between(line);
                have_mail = mail_reply[0] == '2';
                co_await say(mail_reply);
            } else if (verb == "RCPT") {
                if (!have_mail) {
                    co_await say("503 5.5.1 Error: need MAIL command");
                    continue;
                }
                const std::string a = between(line);
                auto it = rcpt_reply.find(a);
                const std::string rep = it == rcpt_reply.end() ? "250 2.1.5 Ok" : it->second;
                if (rep[0] == '2') cur.rcpts.push_back(a);
                co_await say(rep);
            } else if (verb == "DATA") {
                if (cur.rcpts.empty()) {
                    co_await say("554 5.5.1 Error: no valid recipients");
                    continue;
                }
                co_await say("354 End data with <CR><LF>.<CR><LF>");
                ok = co_await read_data(r, cur);
                if (!ok) co_return;
                if (!fault_on.empty() && fault_on == "." && ++seen["."] == fault_nth) {
                    if (fault_action == "hang") {
                        asio::steady_timer t(acc_.get_executor(), 60s);
                        co_await t.async_wait(asio::as_tuple(asio::use_awaitable));
                        co_return;
                    }
                    co_await say(fault_action);
                    s->close();
                    co_return;
                }
                msgs.push_back(cur);
                cur = {};
                have_mail = false;
                co_await say(final_reply);
                if (close_after_message) {
                    s->close();
                    co_return;
                }
            } else if (verb == "RSET") {
                ++rsets;
                cur = {};
                have_mail = false;
                co_await say("250 2.0.0 Ok");
            } else if (verb == "QUIT") {
                ++quits;
                co_await say("221 2.0.0 Bye");
                co_return;
            } else {
                co_await say("502 5.5.2 Error: command not recognized");
            }
        }
    }

    static asio::awaitable<bool> read_data(smx::smtp::LineReader<tcp::socket>& r, Received& cur) {
        std::string line;
        for (;;) {
            auto l = co_await r.read_line(30s);
            if (l.status != smx::smtp::ReadStatus::ok) co_return false;
            line.append(l.text);
            if (!l.complete) continue;
            if (line == ".") co_return true;
            cur.wire += line + "\r\n";
            cur.data += (line[0] == '.' ? line.substr(1) : line) + "\r\n";
            line.clear();
        }
    }

    tcp::acceptor acc_;
};

} // namespace test
