#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/smtp_stream.hpp"

#include <catch2/catch.hpp>

using namespace smx;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

namespace {
// Runs `reader_fn` against a loopback TCP connection whose peer writes `input`
// (then keeps the connection open until the reader is done).
// A connected loopback pair: client and server ends.
struct Loopback {
    asio::io_context io;
    tcp::acceptor acc{io, {asio::ip::make_address("127.0.0.1"), 0}};
    tcp::socket client{io};
    tcp::socket server = [this] {
        client.connect(acc.local_endpoint());
        return acc.accept();
    }();
};

template <class F>
void with_input(const std::string& input, F reader_fn) {
    Loopback lo;
    auto& [io, acc, client, server] = lo;
    asio::write(client, asio::buffer(input));
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await reader_fn(server);
        done = true;
    }, smx::crash_on_exception("test coroutine"));
    io.run_for(std::chrono::seconds(10));
    CHECK(done);
}

// with_input for input larger than the socket buffers: a coroutine writes it
// while the reader reads. With `forever` it writes it again and again until
// the reader is done (a peer that never stops sending).
template <class F>
void with_writer(const std::string& input, bool forever, F reader_fn) {
    Loopback lo;
    bool done = false;
    asio::co_spawn(lo.io, [&]() -> asio::awaitable<void> {
        do {
            auto [ec, n] = co_await asio::async_write(lo.client, asio::buffer(input),
                                                      asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;  // the reader closed its end
        } while (forever && !done);
    }, smx::crash_on_exception("test writer"));
    asio::co_spawn(lo.io, [&]() -> asio::awaitable<void> {
        co_await reader_fn(lo.server);
        done = true;
        lo.server.close();  // ends a write still waiting for room
    }, smx::crash_on_exception("test coroutine"));
    lo.io.run_for(std::chrono::seconds(10));
    CHECK(done);
}
} // namespace

TEST_CASE("line reader splits CRLF lines and flags bare LF") {
    with_input("EHLO a\r\nMAIL FROM:<>\nX\r\n", [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto l1 = co_await r.read_line(1s);
        CHECK(l1.text == "EHLO a");
        CHECK(l1.complete);
        CHECK_FALSE(l1.bare_lf);
        auto l2 = co_await r.read_line(1s);
        CHECK(l2.text == "MAIL FROM:<>");
        CHECK(l2.bare_lf);
        CHECK(r.buffered() == 3);
        auto l3 = co_await r.read_line(1s);
        CHECK(l3.text == "X");
    });
}

TEST_CASE("over-long lines come in chunks, CRLF split at the cut is kept") {
    const std::string big(10, 'a');
    with_input(big + "\r\nok\r\n", [&](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s, 10);
        auto l1 = co_await r.read_line(1s);
        CHECK(l1.text == big);  // 10 bytes fit; the LF is within max+1
        CHECK(l1.complete);
        r.set_max_line(4);
        auto l2 = co_await r.read_line(1s);
        CHECK(l2.text == "ok");
    });
    with_input("abcdefghij\r\nz\r\n", [&](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s, 4);
        std::string all;
        for (;;) {
            auto l = co_await r.read_line(1s);
            REQUIRE(l.status == smtp::ReadStatus::ok);
            all += l.text;
            if (l.complete) break;
            CHECK(l.text.size() <= 4);
        }
        CHECK(all == "abcdefghij");
        const auto st = co_await r.skip_line(1s);  // skips "z"
        CHECK(st == smtp::ReadStatus::ok);
        CHECK(r.buffered() == 0);
    });
}

TEST_CASE("a plain TCP reader holds no buffer while it waits idle") {
    Loopback lo;
    auto& [io, acc, client, server] = lo;
    const std::string longer(40000, 'x');  // more than one read's 16 KiB
    asio::write(client, asio::buffer("EHLO a\r\n" + longer + "\r\n"));
    bool done = false;
    smtp::LineReader r(server, 65536);
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        auto l = co_await r.read_line(1s);
        CHECK(l.text == "EHLO a");
        CHECK(r.held() == 0);  // a command line is read where it landed
        l = co_await r.read_line(1s);
        CHECK(l.text == longer);
        CHECK(l.complete);
        CHECK(r.held() > 0);
        l = co_await r.read_line(2s);  // the client is silent for a while
        CHECK(l.text == "NOOP");
        CHECK(l.complete);
        l = co_await r.read_line(100ms);  // idle, no buffer: the deadline holds
        CHECK(l.status == smtp::ReadStatus::timeout);
        l = co_await r.read_line(2s);
        CHECK(l.status == smtp::ReadStatus::eof);
        done = true;
    }, smx::crash_on_exception("test coroutine"));
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io, 100ms);
        co_await t.async_wait(asio::use_awaitable);
        CHECK(r.held() == 0);
        co_await asio::async_write(client, asio::buffer(std::string("NOOP\r\n")),
                                   asio::use_awaitable);
        t.expires_after(300ms);
        co_await t.async_wait(asio::use_awaitable);
        CHECK(r.held() == 0);
        client.close();
    }, smx::crash_on_exception("test coroutine"));
    io.run_for(std::chrono::seconds(10));
    CHECK(done);
}

TEST_CASE("a silent peer times out") {
    with_input("partial", [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto l = co_await r.read_line(std::chrono::milliseconds(100));
        CHECK(l.status == smtp::ReadStatus::timeout);
    });
}

TEST_CASE("a shorter deadline after a longer one still fires on time") {
    with_input("first\r\n", [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto a = co_await r.read_line(std::chrono::seconds(300));
        CHECK(a.text == "first");
        const auto t0 = std::chrono::steady_clock::now();
        auto b = co_await r.read_line(std::chrono::milliseconds(100));
        CHECK(b.status == smtp::ReadStatus::timeout);
        CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
    });
}

TEST_CASE("write_all delivers large buffers completely") {
    asio::io_context io;
    tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
    tcp::socket client(io);
    client.connect(acc.local_endpoint());
    tcp::socket server = acc.accept();
    const std::string big(8 << 20, 'x');  // more than the socket buffers hold
    bool ok = false;
    std::size_t got = 0;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        ok = co_await smtp::write_all(client, big, std::chrono::seconds(10));
        client.shutdown(tcp::socket::shutdown_send);
    }, smx::crash_on_exception("test coroutine"));
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        std::string buf(65536, '\0');
        for (;;) {
            auto [ec, n] = co_await server.async_read_some(asio::buffer(buf),
                                                           asio::as_tuple(asio::use_awaitable));
            got += n;
            if (ec) break;
        }
    }, smx::crash_on_exception("test coroutine"));
    io.run_for(std::chrono::seconds(20));
    CHECK(ok);
    CHECK(got == big.size());
}

// smx::smtp::Stream before STARTTLS takes write_all's plain-socket path:
// what the peer reads is each write once, in order, however large.
TEST_CASE("write_all over a plain Stream sends each write exactly once") {
    Loopback lo;
    smtp::Stream out(std::move(lo.client));
    const std::string big(8 << 20, 'y');  // more than the socket buffers hold
    const std::string expect = "EHLO a\r\n" + big + "QUIT\r\n";
    bool ok = false;
    std::string got;
    asio::co_spawn(lo.io, [&]() -> asio::awaitable<void> {
        ok = co_await smtp::write_all(out, "EHLO a\r\n", 10s) &&
             co_await smtp::write_all(out, big, 10s) &&
             co_await smtp::write_all(out, "QUIT\r\n", 10s);
        out.socket().shutdown(tcp::socket::shutdown_send);
    }, smx::crash_on_exception("test coroutine"));
    asio::co_spawn(lo.io, [&]() -> asio::awaitable<void> {
        std::string buf(65536, '\0');
        for (;;) {
            auto [ec, n] = co_await lo.server.async_read_some(asio::buffer(buf),
                                                              asio::as_tuple(asio::use_awaitable));
            got.append(buf.data(), n);
            if (ec) break;
        }
    }, smx::crash_on_exception("test coroutine"));
    lo.io.run_for(20s);
    CHECK(ok);
    CHECK(got.size() == expect.size());
    CHECK(got == expect);
}

TEST_CASE("write_all to a peer that reads nothing ends at its deadline") {
    Loopback lo;
    smtp::Stream out(std::move(lo.client));
    const std::string big(64 << 20, 'z');  // never fits the socket buffers
    bool ok = true;
    bool done = false;
    const auto t0 = std::chrono::steady_clock::now();
    asio::co_spawn(lo.io, [&]() -> asio::awaitable<void> {
        ok = co_await smtp::write_all(out, big, 200ms);
        done = true;
    }, smx::crash_on_exception("test coroutine"));
    lo.io.run_for(10s);
    CHECK(done);
    CHECK_FALSE(ok);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
}

TEST_CASE("multi-line replies and enhanced codes") {
    with_input("250-relay.example\r\n250-PIPELINING\r\n250 8BITMIME\r\n451 4.3.0 try later\r\n"
               "25x bad\r\n",
               [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto a = co_await smtp::read_reply(r, 1s);
        CHECK(a.code == 250);
        REQUIRE(a.lines.size() == 3);
        CHECK(a.lines[1] == "PIPELINING");
        auto b = co_await smtp::read_reply(r, 1s);
        CHECK(b.code == 451);
        CHECK(b.enhanced == "4.3.0");
        CHECK(b.text() == "try later");
        auto c = co_await smtp::read_reply(r, 1s);
        CHECK(c.code == 0);
        CHECK(c.status == smtp::ReadStatus::error);
    });
}

TEST_CASE("a reply's control characters are masked as it is read") {
    using namespace std::string_literals;
    with_input("550-5.1.1 a\rb\x1b[2J\r\n550 c\0d\r\n"s, [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto a = co_await smtp::read_reply(r, 1s);
        CHECK(a.code == 550);
        REQUIRE(a.lines.size() == 2);
        CHECK(a.lines[0] == "5.1.1 a?b?[2J");
        CHECK(a.lines[1] == "c?d");
        CHECK(a.enhanced == "5.1.1");
    });
}

TEST_CASE("printable keeps printable ASCII and masks the rest") {
    using namespace std::string_literals;
    CHECK(smtp::printable("X-Opt=1 a~") == "X-Opt=1 a~");
    CHECK(smtp::printable("a\rb\nc\0d\x7f\xc3\xa9\te"s) == "a?b?c?d??? e");
}

TEST_CASE("split_enhanced") {
    CHECK(smtp::split_enhanced("2.1.0 Ok").first == "2.1.0");
    CHECK(smtp::split_enhanced("5.7.1 Relay denied").second == "Relay denied");
    CHECK(smtp::split_enhanced("2.0 nope").first.empty());
    CHECK(smtp::split_enhanced("Ok").second == "Ok");
    CHECK(smtp::split_enhanced("4.4.10x").first.empty());
}

TEST_CASE("a huge reply keeps only a capped text and the stream stays in step") {
    std::string in;
    const std::string long_text(4000, 'x');
    for (int i = 0; i < 99; ++i) in += "550-5.1.1 " + long_text + "\r\n";
    in += "550 5.1.1 last\r\n250 2.0.0 next\r\n";
    with_writer(in, false, [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        auto a = co_await smtp::read_reply(r, 5s);
        CHECK(a.code == 550);
        CHECK(a.enhanced == "5.1.1");
        CHECK(a.truncated);
        std::size_t kept = 0;
        for (const auto& l : a.lines) {
            CHECK(l.size() <= smtp::reply_line_keep);
            kept += l.size();
        }
        CHECK(kept <= smtp::reply_text_keep);
        CHECK(a.lines.size() <= smtp::reply_lines_keep);
        auto b = co_await smtp::read_reply(r, 5s);
        CHECK(b.code == 250);
        CHECK(b.text() == "next");
    });
}

namespace {
// A 250 reply of n lines ("250-2.0.0 line i", the last "250 2.0.0 last"),
// then "221 next".
std::string long_250(std::size_t n) {
    std::string in;
    for (std::size_t i = 0; i + 1 < n; ++i) in += "250-2.0.0 line " + std::to_string(i) + "\r\n";
    return in + "250 2.0.0 last\r\n221 next\r\n";
}
} // namespace

// A next hop may answer the end of data with any number of lines: that is a
// delivery, not a broken connection (after which the message would be sent
// again).
TEST_CASE("a reply of 101 or 10,000 lines is read to its last line, its first lines kept") {
    for (const std::size_t n : {smtp::reply_lines_keep, smtp::reply_lines_keep + 1,
                                std::size_t{10000}}) {
        INFO(n << " lines");
        with_writer(long_250(n), false, [n](tcp::socket& s) -> asio::awaitable<void> {
            smtp::LineReader r(s);
            auto a = co_await smtp::read_reply(r, 5s);
            CHECK(a.status == smtp::ReadStatus::ok);
            CHECK(a.code == 250);
            CHECK(a.enhanced == "2.0.0");
            REQUIRE(a.lines.size() == std::min(n, smtp::reply_lines_keep));
            CHECK(a.lines[0] == "2.0.0 line 0");
            CHECK(a.truncated == (n > smtp::reply_lines_keep));
            std::size_t kept = 0;
            for (const auto& l : a.lines) kept += l.size();
            CHECK(kept <= smtp::reply_text_keep);
            auto b = co_await smtp::read_reply(r, 5s);  // in step
            CHECK(b.code == 221);
            CHECK(b.text() == "next");
        });
    }
}

TEST_CASE("a bad or mixed-code line after the kept lines still breaks the reply") {
    std::string lines;
    for (int i = 0; i < 150; ++i) lines += "250-more\r\n";
    for (const char* bad : {"251-other code\r\n", "25x what\r\n", "hello\r\n"}) {
        INFO(bad);
        with_input(lines + bad + "250 end\r\n", [](tcp::socket& s) -> asio::awaitable<void> {
            smtp::LineReader r(s);
            auto a = co_await smtp::read_reply(r, 5s);
            CHECK(a.code == 0);
            CHECK(a.status == smtp::ReadStatus::error);
        });
    }
}

TEST_CASE("a reply that never ends, sent as fast as the peer can, ends at its deadline") {
    std::string flood;
    while (flood.size() < 65536) flood += "250-more and more\r\n";
    with_writer(flood, true, [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        const auto t0 = std::chrono::steady_clock::now();
        auto a = co_await smtp::read_reply(r, 300ms);
        CHECK(a.code == 0);
        CHECK(a.status == smtp::ReadStatus::timeout);
        CHECK(std::chrono::steady_clock::now() - t0 < 5s);
        CHECK(r.held() <= 2 * 16384);  // one read's buffer, not the reply
    });
}

namespace {
// A peer that sends `unit` every `every`, `n` times, on a loopback connection,
// while `reader_fn` reads the other end.
template <class F>
void with_drip(std::string unit, std::chrono::milliseconds every, int n, F reader_fn) {
    asio::io_context io;
    tcp::acceptor acc(io, {asio::ip::make_address("127.0.0.1"), 0});
    tcp::socket client(io);
    client.connect(acc.local_endpoint());
    tcp::socket server = acc.accept();
    bool done = false;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        asio::steady_timer t(io);
        for (int i = 0; i < n && !done; ++i) {
            co_await asio::async_write(client, asio::buffer(unit), asio::use_awaitable);
            t.expires_after(every);
            co_await t.async_wait(asio::use_awaitable);
        }
    }, crash_on_exception("drip writer"));
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
        co_await reader_fn(server);
        done = true;
    }, crash_on_exception("drip reader"));
    io.run_for(std::chrono::seconds(10));
    CHECK(done);
}
} // namespace

TEST_CASE("a line dripped byte by byte ends at its one deadline") {
    with_drip("a", 20ms, 200, [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        const auto t0 = std::chrono::steady_clock::now();
        auto l = co_await r.read_line(300ms);
        CHECK(l.status == smtp::ReadStatus::timeout);
        CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    });
}

TEST_CASE("a reply dripped line by line ends at its one deadline") {
    with_drip("250-wait\r\n", 20ms, 200, [](tcp::socket& s) -> asio::awaitable<void> {
        smtp::LineReader r(s);
        const auto t0 = std::chrono::steady_clock::now();
        auto rep = co_await smtp::read_reply(r, 300ms);
        CHECK(rep.code == 0);
        CHECK(rep.status == smtp::ReadStatus::timeout);
        CHECK(std::chrono::steady_clock::now() - t0 < 2s);
    });
}
