// MilterConn against a milter played by a coroutine on a real socket.
#include "libsm/milter_conn.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace smx::milter;
using namespace std::string_literals;
namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using steady = std::chrono::steady_clock;

namespace {

std::string u32(std::uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
}

std::string packet(char cmd, const std::string& data = "") {
    return u32(static_cast<std::uint32_t>(data.size() + 1)) + cmd + data;
}

// One packet from the MTA: command octet and data.
asio::awaitable<std::pair<char, std::string>> read_cmd(tcp::socket& s) {
    std::array<unsigned char, 4> h{};
    auto [ec, n] = co_await asio::async_read(s, asio::buffer(h), smx::await_tuple);
    if (ec) co_return std::pair<char, std::string>{0, {}};
    std::string body((h[0] << 24) | (h[1] << 16) | (h[2] << 8) | h[3], '\0');
    auto [ec2, n2] = co_await asio::async_read(s, asio::buffer(body), smx::await_tuple);
    if (ec2) co_return std::pair<char, std::string>{0, {}};
    co_return std::pair<char, std::string>{body[0], body.substr(1)};
}

asio::awaitable<void> write(tcp::socket& s, const std::string& bytes) {
    auto [ec, n] = co_await asio::async_write(s, asio::buffer(bytes), smx::await_tuple);
    REQUIRE(!ec);
}

struct Fixture {
    asio::io_context io;
    tcp::acceptor acc{io, tcp::endpoint(asio::ip::make_address("127.0.0.1"), 0)};
    ConnSettings settings() {
        ConnSettings s;
        s.socket = "inet:127.0.0.1:" + std::to_string(acc.local_endpoint().port());
        std::string err;
        s.where = *parse_socket(s.socket, err);
        s.command_timeout = std::chrono::milliseconds(300);
        s.content_timeout = std::chrono::milliseconds(300);
        s.connect_timeout = std::chrono::seconds(2);
        return s;
    }
};

const MacroLookup macros = [](std::string_view n) -> std::optional<std::string> {
    if (n == "j") return "mx.example";
    if (n == "client_addr") return "192.0.2.1";
    if (n == "i") return "QID1";
    return std::nullopt;
};

} // namespace

TEST_CASE("milter socket specs", "[milter]") {
    std::string err;
    auto s = parse_socket("inet:127.0.0.1:8891", err);
    REQUIRE(s);
    CHECK((!s->is_unix && s->host == "127.0.0.1" && s->port == 8891));
    s = parse_socket("inet:[::1]:11332", err);
    REQUIRE(s);
    CHECK((s->host == "::1" && s->port == 11332));
    s = parse_socket("inet:localhost:25", err);
    REQUIRE(s);
    CHECK(s->host == "localhost");
    s = parse_socket("unix:/run/opendkim/opendkim.sock", err);
    REQUIRE(s);
    CHECK((s->is_unix && s->path == "/run/opendkim/opendkim.sock"));
    CHECK(parse_socket("local:/x", err));
    CHECK_FALSE(parse_socket("unix:relative", err));
    CHECK(err == "\"unix:relative\": unix: needs an absolute path");
    CHECK_FALSE(parse_socket("inet:host", err));
    CHECK_FALSE(parse_socket("inet:host:0", err));
    CHECK_FALSE(parse_socket("inet:host:65536", err));
    CHECK_FALSE(parse_socket("inet::25", err));
    CHECK_FALSE(parse_socket("inet:[::1]25", err));
    CHECK_FALSE(parse_socket("tcp:host:25", err));
    CHECK(err == "\"tcp:host:25\": expected inet:host:port or unix:/path");
}

TEST_CASE("milter connection: stages, macros, no-reply steps and edits", "[milter]") {
    Fixture f;
    std::vector<std::pair<char, std::string>> seen;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = co_await f.acc.async_accept(asio::use_awaitable);
        auto opt = co_await read_cmd(s);
        seen.push_back(opt);
        // v6, header edits and body replacement; no HELO; no reply to RCPT;
        // its own macros for MAIL.
        co_await write(s, packet('O', u32(6) + u32(action::add_headers | action::change_body |
                                                    action::change_headers) +
                                          u32(step::no_helo | step::nr_rcpt) + u32(2) +
                                          "i {client_addr}\0"s));
        for (;;) {
            auto c = co_await read_cmd(s);
            if (c.first == 0) break;
            seen.push_back(c);
            switch (c.first) {
            case 'D': case 'R': case 'A': case 'Q': break;
            case 'C': co_await write(s, packet('p') + packet('c')); break;
            case 'M': co_await write(s, packet('y', "550-5.7.1 no\r\n550 5.7.1 never\0"s)); break;
            case 'E':
                co_await write(s, packet('h', "X-A\0one\0"s) + packet('b', "new ") +
                                      packet('i', u32(0) + "X-B\0two\0"s) +
                                      packet('b', "body\r\n") + packet('a'));
                break;
            default: co_await write(s, packet('c'));
            }
        }
    }, smx::crash_on_exception("peer"));
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        Conn c(f.io.get_executor(), f.settings());
        auto r = co_await c.open();
        REQUIRE(r.status == Result::ok);
        CHECK(c.negotiated().version == 6);
        r = co_await c.connect(macros, "[192.0.2.1]", Family::inet, 4000, "192.0.2.1");
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        r = co_await c.helo(macros, "client.example");
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        const std::vector<std::string> mail = {"<a@example.org>", "SIZE=10"};
        r = co_await c.mail(macros, mail);
        REQUIRE(r.status == Result::ok);
        CHECK(r.reply.act == Act::replycode);
        CHECK(r.reply.code == 550);
        CHECK(r.reply.lines == std::vector<std::string>{"5.7.1 no", "5.7.1 never"});
        const std::vector<std::string> rcpt = {"<b@example.net>"};
        r = co_await c.rcpt(macros, rcpt);
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        r = co_await c.header(macros, "Subject", " folded\r\n\tline\r\n");
        CHECK(r.status == Result::ok);
        r = co_await c.body(macros, std::string(chunk_size + 10, 'x'));
        CHECK(r.status == Result::ok);
        r = co_await c.eom(macros, 100);
        REQUIRE(r.status == Result::ok);
        CHECK(r.reply.act == Act::accept);
        REQUIRE(r.edits.size() == 3);
        CHECK((r.edits[0].act == Act::addheader && r.edits[0].name == "X-A"));
        CHECK((r.edits[1].act == Act::replbody && r.edits[1].text == "new body\r\n"));
        CHECK((r.edits[2].act == Act::insheader && r.edits[2].name == "X-B"));
        r = co_await c.quit();
        CHECK(r.status == Result::ok);
        CHECK_FALSE(c.alive());
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(10));
    // OPTNEG offered v6, every action, every v6 step but RCPT_REJ.
    REQUIRE(seen.size() >= 12);
    CHECK(seen[0] == std::pair{'O', u32(6) + u32(action::all) + u32(step::v6 & ~step::rcpt_rej)});
    CHECK(seen[1] == std::pair{'D', "Cj\0mx.example\0{client_addr}\0" "192.0.2.1\0"s});
    CHECK(seen[2].first == 'C');
    // No HELO; MAIL with the milter's own macro list.
    CHECK(seen[3] == std::pair{'D', "Mi\0QID1\0{client_addr}\0" "192.0.2.1\0"s});
    CHECK(seen[4] == std::pair{'M', "<a@example.org>\0SIZE=10\0"s});
    CHECK(seen[5] == std::pair{'D', "Ri\0QID1\0"s});
    CHECK(seen[6].first == 'R');
    CHECK(seen[7] == std::pair{'L', "Subject\0folded\n\tline\0"s});
    CHECK(seen[8].first == 'D');
    CHECK((seen[9].first == 'B' && seen[9].second.size() == chunk_size));
    CHECK(seen[10].first == 'D');
    CHECK((seen[11].first == 'B' && seen[11].second.size() == 10));
    CHECK(seen.back().first == 'Q');
}

TEST_CASE("milter connection failures become errors, then dead", "[milter]") {
    Fixture f;
    std::string mode;
    SECTION("stall") { mode = "stall"; }
    SECTION("garbage") { mode = "garbage"; }
    SECTION("huge packet") { mode = "huge"; }
    SECTION("close") { mode = "close"; }
    SECTION("edit not negotiated") { mode = "edit"; }
    SECTION("body replacement too large") { mode = "body"; }
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = co_await f.acc.async_accept(asio::use_awaitable);
        co_await read_cmd(s);
        co_await write(s, packet('O', u32(6) + u32(action::change_body) + u32(0)));
        for (;;) {
            auto c = co_await read_cmd(s);
            if (c.first == 0) break;
            if (c.first != 'E') {
                if (c.first != 'D') co_await write(s, packet('c'));
                continue;
            }
            if (mode == "stall") {
                asio::steady_timer t(s.get_executor(), std::chrono::seconds(3));
                co_await t.async_wait(smx::await_tuple);
            } else if (mode == "garbage") {
                co_await write(s, packet('Z', "junk"));
            } else if (mode == "huge") {
                co_await write(s, u32(2u << 20) + "b");
            } else if (mode == "close") {
                break;
            } else if (mode == "edit") {
                co_await write(s, packet('h', "X\0y\0"s));
            } else {
                co_await write(s, packet('b', std::string(60, 'x')) +
                                      packet('b', std::string(60, 'x')));
            }
        }
    }, smx::crash_on_exception("peer"));
    std::string what;
    Result::Status after = Result::ok;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        Conn c(f.io.get_executor(), f.settings());
        auto r = co_await c.open();
        REQUIRE(r.status == Result::ok);
        r = co_await c.eom(macros, 100);
        CHECK(r.status == Result::error);
        what = r.what;
        CHECK_FALSE(c.alive());
        const std::vector<std::string> rcpt = {"<x@y>"};
        r = co_await c.rcpt(macros, rcpt);
        after = r.status;
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(10));
    CHECK(after == Result::dead);
    if (mode == "stall")
        CHECK(what == "can't read SMFIC_BODYEOB reply packet header: Connection timed out");
    if (mode == "garbage") CHECK(what == "unexpected unknown reply 'Z' after SMFIC_BODYEOB");
    if (mode == "huge") CHECK(what == "unreasonable packet length: 2097152 > 1048576");
    if (mode == "close") CHECK(what == "can't read SMFIC_BODYEOB reply packet header: lost connection");
    if (mode == "edit") CHECK(what == "SMFIR_ADDHEADER was not negotiated (actions 2)");
    if (mode == "body") CHECK(what == "body replacement larger than 100 octets");
}

TEST_CASE("milter connection: refused, and a version we do not speak", "[milter]") {
    Fixture f;
    auto s = f.settings();
    f.acc.close();
    std::string what;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        Conn c(f.io.get_executor(), s);
        auto r = co_await c.open();
        what = r.what;
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(10));
    CHECK(what == "connect: Connection refused");

    Fixture g;
    asio::co_spawn(g.io, [&]() -> asio::awaitable<void> {
        auto sock = co_await g.acc.async_accept(asio::use_awaitable);
        co_await read_cmd(sock);
        co_await write(sock, packet('O', u32(7) + u32(0) + u32(0)));
        co_await read_cmd(sock);
    }, smx::crash_on_exception("peer"));
    asio::co_spawn(g.io, [&]() -> asio::awaitable<void> {
        Conn c(g.io.get_executor(), g.settings());
        auto r = co_await c.open();
        what = r.what;
    }, smx::crash_on_exception("mta"));
    g.io.run_for(std::chrono::seconds(10));
    CHECK(what == "protocol version 7 conflict with MTA protocol version 6");
}

TEST_CASE("milter connection: what gets no reply waits for the next packet that does",
          "[milter]") {
    Fixture f;
    std::vector<std::pair<char, std::string>> seen;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = co_await f.acc.async_accept(asio::use_awaitable);
        co_await read_cmd(s);
        // No reply to header fields nor to body chunks.
        co_await write(s, packet('O', u32(6) + u32(0) + u32(step::nr_header | step::nr_body)));
        for (;;) {
            auto c = co_await read_cmd(s);
            if (c.first == 0) break;
            seen.push_back(c);
            if (c.first == 'N' || c.first == 'E') co_await write(s, packet('c'));
        }
    }, smx::crash_on_exception("peer"));
    std::size_t seen_after_headers = 0, body_packets_before_eom = 0;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        Conn c(f.io.get_executor(), f.settings());
        // (co_await inside a Catch macro is evaluated more than once by GCC 12.)
        auto r = co_await c.open();
        REQUIRE(r.status == Result::ok);
        const std::vector<std::pair<std::string, std::string>> fields = {
            {"From", " a@example.org\r\n"}, {"To", " b@example.net,\r\n\tc@example.net\r\n"},
            {"Subject", " three\r\n"}};
        for (const auto& [name, value] : fields) {
            r = co_await c.header(macros, name, value);
            CHECK(r.status == Result::ok);
        }
        // Nothing was written yet: the peer has had its turn and seen nothing.
        asio::steady_timer t(f.io, std::chrono::milliseconds(50));
        co_await t.async_wait(smx::await_tuple);
        seen_after_headers = seen.size();
        r = co_await c.eoh(macros);
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        // Body chunks fill a write of their own: they do not wait for the end
        // of the message, held in memory.
        r = co_await c.body(macros, std::string(3 * chunk_size, 'x'));
        CHECK(r.status == Result::ok);
        for (int i = 0; i < 100 && std::ranges::count(seen, 'B', &std::pair<char, std::string>::first) < 3; ++i) {
            t.expires_after(std::chrono::milliseconds(50));
            co_await t.async_wait(smx::await_tuple);
        }
        body_packets_before_eom = std::ranges::count(seen, 'B', &std::pair<char, std::string>::first);
        r = co_await c.eom(macros, 0);
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        r = co_await c.quit();
        CHECK(r.status == Result::ok);
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(20));
    // Both ended: the connection's watchdog did not outlive it.
    CHECK(f.io.stopped());
    CHECK(seen_after_headers == 0);
    CHECK(body_packets_before_eom == 3);
    REQUIRE(seen.size() >= 5);
    CHECK(seen[0] == std::pair{'L', "From\0a@example.org\0"s});
    CHECK(seen[1] == std::pair{'L', "To\0b@example.net,\n\tc@example.net\0"s});
    CHECK(seen[2] == std::pair{'L', "Subject\0three\0"s});
    CHECK(seen[3] == std::pair{'N', ""s});
}

TEST_CASE("milter connection: a deadline nearer than the one the timer waits for still ends "
          "the wait", "[milter]") {
    Fixture f;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = co_await f.acc.async_accept(asio::use_awaitable);
        co_await read_cmd(s);
        co_await write(s, packet('O', u32(6) + u32(0) + u32(0)));
        for (;;) {
            auto c = co_await read_cmd(s);
            if (c.first == 0) break;
            if (c.first == 'D') continue;
            // Slower than the command timeout (so the timer, woken by it,
            // waits for the content timeout next), within the content one.
            asio::steady_timer t(s.get_executor(), std::chrono::milliseconds(c.first == 'N' ? 600 : 3000));
            co_await t.async_wait(smx::await_tuple);
            co_await write(s, packet('c'));
        }
    }, smx::crash_on_exception("peer"));
    std::string what;
    steady::duration took{};
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = f.settings();
        s.content_timeout = std::chrono::seconds(10);
        Conn c(f.io.get_executor(), s);
        auto r = co_await c.open();
        REQUIRE(r.status == Result::ok);
        r = co_await c.eoh(macros);
        CHECK((r.status == Result::ok && r.reply.act == Act::cont));
        const auto start = steady::now();
        const std::vector<std::string> rcpt = {"<x@y>"};
        r = co_await c.rcpt(macros, rcpt);
        took = steady::now() - start;
        CHECK(r.status == Result::error);
        what = r.what;
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(20));
    CHECK(what == "can't read SMFIC_RCPT reply packet header: Connection timed out");
    // The command timeout (300 ms), not the 10 s the timer was set to.
    CHECK(took < std::chrono::seconds(5));
}

TEST_CASE("milter connection: a write the socket cannot take at once waits within its deadline",
          "[milter]") {
    Fixture f;
    // A body with no reply to its chunks, more than the socket buffers
    // hold while the peer does not read.
    const std::size_t size = 32u << 20;
    bool stall = false;
    SECTION("the milter reads late") { stall = false; }
    SECTION("the milter never reads") { stall = true; }
    std::size_t body = 0;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = co_await f.acc.async_accept(asio::use_awaitable);
        co_await read_cmd(s);
        co_await write(s, packet('O', u32(6) + u32(0) + u32(step::nr_body)));
        asio::steady_timer t(s.get_executor(), std::chrono::milliseconds(stall ? 3000 : 200));
        co_await t.async_wait(smx::await_tuple);
        for (;;) {
            auto c = co_await read_cmd(s);
            if (c.first == 0) break;
            if (c.first == 'B') body += c.second.size();
            if (c.first == 'E') co_await write(s, packet('c'));
        }
    }, smx::crash_on_exception("peer"));
    std::string what;
    asio::co_spawn(f.io, [&]() -> asio::awaitable<void> {
        auto s = f.settings();
        if (!stall) s.content_timeout = std::chrono::seconds(10);
        Conn c(f.io.get_executor(), s);
        auto r = co_await c.open();
        REQUIRE(r.status == Result::ok);
        r = co_await c.body(macros, std::string(size, 'x'));
        if (r.status == Result::ok) r = co_await c.eom(macros, 0);
        what = r.what;
        if (r.status == Result::ok) r = co_await c.quit();
    }, smx::crash_on_exception("mta"));
    f.io.run_for(std::chrono::seconds(30));
    if (stall) {
        CHECK(what == "error writing SMFIC_BODY: Connection timed out");
    } else {
        CHECK(what.empty());
        CHECK(body == size);
    }
}
