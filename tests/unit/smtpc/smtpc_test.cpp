// SMTPC unit tests: deliveries against a scripted SMTP sink on 127.0.0.1,
// and the QMGR side against a fake QMGR on a Unix socket.
#include "smtpc/agent.hpp"
#include "smtpc/body.hpp"
#include "smtpc/connection_cache.hpp"
#include "smtpc/delivery.hpp"
#include "smtpc/nexthop.hpp"
#include "tests/unit/smtpc/test_sink.hpp"

#include "libsm/channel.hpp"
#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"
#include "libsm/panic.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using test::Sink;
namespace asio = boost::asio;

namespace {

struct TempDir {
    TempDir() {
        path = fs::temp_directory_path() / ("smtpc-test-" + smx::new_ta_id());
        fs::create_directories(path);
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
    fs::path path;
};

// One SMTPC "process" inside the test: resolver, cache, deliverer on io.
smx::Config test_config(const fs::path& spool) {
    smx::Config cfg;
    cfg.queue.spool_dir = spool.string();
    cfg.client.helo_name = "client.test";
    cfg.client.command_timeout = 5s;
    cfg.client.connect_timeout = 5s;
    return cfg;
}

struct Harness {

    // Writes a content file and returns a DELIVER for it.
    smx::msg::Deliver message(const std::string& body, std::vector<std::string> rcpts,
                             const std::string& nexthop) {
        smx::msg::Deliver d;
        d.da_id = ++da;
        d.ta_id = d.content_id = smx::new_ta_id();
        d.sender = "sender@example.org";
        for (std::uint32_t i = 0; i < rcpts.size(); ++i) d.rcpts.push_back({i, rcpts[i], ""});
        d.nexthops = {nexthop};
        const fs::path p = smx::content::file_path(cfg.content_dir_abs(), d.content_id, cfg.queue.cdb_hashed);
        fs::create_directories(p.parent_path());
        std::ofstream(p, std::ios::binary) << body;
        d.size = body.size();
        return d;
    }

    template <class T>
    T run(asio::awaitable<T> a) {
        std::optional<T> out;
        asio::co_spawn(io, std::move(a), [&](std::exception_ptr e, T v) {
            if (e) std::rethrow_exception(e);
            out = std::move(v);
        });
        const auto limit = std::chrono::steady_clock::now() + 30s;
        while (!out && std::chrono::steady_clock::now() < limit) io.run_one_for(100ms);
        REQUIRE(out);
        return std::move(*out);
    }

    smx::msg::Result deliver(const smx::msg::Deliver& d) { return run(del.deliver(d)); }

    // Lets pending handlers (idle watchers, QUIT) run for a while.
    void settle(std::chrono::milliseconds t = 50ms) {
        const auto until = std::chrono::steady_clock::now() + t;
        while (std::chrono::steady_clock::now() < until) io.run_one_for(10ms);
    }

    TempDir dir;
    smx::Config cfg = test_config(dir.path);
    asio::io_context io;
    smx::smtpc::Resolver dns{io.get_executor()};
    smx::smtpc::ConnectionCache cache{cfg.client};
    smx::smtpc::Deliverer del{cfg, dns, cache};
    std::uint64_t da = 0;
};

const std::string simple = "Received: by test\r\nSubject: hi\r\n\r\nhello\r\n";

} // namespace

TEST_CASE("encode_body doubles leading dots across block boundaries") {
    std::string out;
    smx::smtpc::BodyState st;
    smx::smtpc::encode_body(".a\r\n..b\r\nc.d\r\n.", st, out);
    CHECK(out == "..a\r\n...b\r\nc.d\r\n..");
    CHECK(st.col == 1);
    out.clear();
    st = {};
    smx::smtpc::encode_body("x\r\n", st, out);
    CHECK(st.col == 0);
    smx::smtpc::encode_body(".y\r", st, out);  // block starts a line
    smx::smtpc::encode_body("\n.z", st, out);  // LF at the start of a block
    CHECK(out == "x\r\n..y\r\n..z");
}

TEST_CASE("encode_body breaks lines over 998 octets with CRLF SPACE, as postfix") {
    const std::string a998(998, 'a');
    std::string out;
    smx::smtpc::BodyState st;
    smx::smtpc::encode_body(a998 + "\r\n" + a998 + "b\r\n", st, out);
    CHECK(out == a998 + "\r\n" + a998 + "\r\n b\r\n");
    // 998 + 997 + 997 + 1: the space counts towards the continuation line;
    // blocks cut anywhere, also between CR and LF at the limit.
    const std::string line = "." + std::string(2992, 'x');
    for (std::size_t cut : {std::size_t(1), std::size_t(998), std::size_t(999),
                            std::size_t(1995), std::size_t(2993), std::size_t(2994)}) {
        const std::string in = line + "\r\n.\r\n";
        out.clear();
        st = {};
        smx::smtpc::encode_body(std::string_view(in).substr(0, cut), st, out);
        smx::smtpc::encode_body(std::string_view(in).substr(cut), st, out);
        CHECK(out == ".." + line.substr(1, 997) + "\r\n " + line.substr(998, 997) + "\r\n " +
                         line.substr(1995, 997) + "\r\n " + line.substr(2992) + "\r\n..\r\n");
        CHECK(st.col == 0);
    }
}

TEST_CASE("answer_ttl takes the smallest TTL of the answers") {
    // Header (1 question, 2 answers), question "a." MX IN, two MX answers
    // with compressed names and TTLs 300 and 120.
    const unsigned char pkt[] = {
        0, 1, 0x81, 0x80, 0, 1, 0, 2, 0, 0, 0, 0,
        1, 'a', 0, 0, 15, 0, 1,
        0xC0, 12, 0, 15, 0, 1, 0, 0, 1, 44, 0, 4, 0, 10, 0xC0, 12,
        0xC0, 12, 0, 15, 0, 1, 0, 0, 0, 120, 0, 4, 0, 20, 0xC0, 12,
    };
    CHECK(smx::dns::answer_ttl(pkt, sizeof pkt) == 120);
    CHECK(smx::dns::answer_ttl(pkt, 12) == 0);
    CHECK(smx::dns::answer_ttl(pkt, 30) == 0);  // truncated answer: ignored
}

TEST_CASE("several messages go over one reused connection") {
    Harness h;
    Sink sink(h.io);
    for (int i = 0; i < 3; ++i) {
        auto d = h.message(simple, {"a@example.net", "b@example.net"}, sink.nexthop());
        auto r = h.deliver(d);
        CHECK(r.da_id == d.da_id);
        CHECK(r.relay == "127.0.0.1[127.0.0.1]:" + std::to_string(sink.port()));
        REQUIRE(r.rcpts.size() == 2);
        for (const auto& rc : r.rcpts) {
            CHECK(rc.code == 250);
            CHECK(rc.enhanced == "2.0.0");
            CHECK(rc.text == "Ok: queued");
        }
        CHECK(r.rcpts[1].idx == 1);
    }
    CHECK(sink.connections == 1);
    REQUIRE(sink.msgs.size() == 3);
    CHECK(sink.msgs[0].sender == "sender@example.org");
    CHECK(sink.msgs[0].rcpts == std::vector<std::string>{"a@example.net", "b@example.net"});
    CHECK(sink.msgs[2].data == simple);
    CHECK(sink.rsets == 0);
    CHECK(h.cache.idle() == 1);
}

TEST_CASE("PIPELINING is used when offered, and only then") {
    for (bool pipe : {true, false}) {
        Harness h;
        Sink sink(h.io);
        sink.pipelining = pipe;
        auto r = h.deliver(h.message(simple, {"a@x.test", "b@x.test", "c@x.test"}, sink.nexthop()));
        for (const auto& rc : r.rcpts) CHECK(rc.code == 250);
        CHECK(sink.saw_pipelined == pipe);
        REQUIRE(sink.msgs.size() == 1);
        CHECK(sink.msgs[0].rcpts.size() == 3);
        CHECK(std::find(sink.commands.begin(), sink.commands.end(),
                        "MAIL FROM:<sender@example.org> SIZE=" + std::to_string(simple.size())) !=
              sink.commands.end());
    }
}

// What a next hop gets of CRLF lines: those over 998 octets broken by CRLF
// SPACE every 998 octets, the space counted (postfix's smtp_line_length_limit).
std::string broken_lines(const std::string& body) {
    std::string out;
    for (std::size_t pos = 0; pos < body.size();) {
        const std::size_t end = body.find("\r\n", pos);
        std::string line = body.substr(pos, end - pos);
        pos = end + 2;
        while (line.size() > 998) {
            out += line.substr(0, 998) + "\r\n";
            line = " " + line.substr(998);
        }
        out += line + "\r\n";
    }
    return out;
}

TEST_CASE("dot-stuffing is exact, also at 64 KiB block boundaries") {
    Harness h;
    Sink sink(h.io);
    std::string body = ".leading\r\n..two\r\n.\r\nmid.dle\r\n";
    // Put a line start with '.' exactly at the 64 KiB block boundary, and
    // a CRLF split across the second boundary.
    body += std::string(65536 - body.size() - 2, 'x') + "\r\n";
    REQUIRE(body.size() == 65536);
    body += ".after boundary\r\n";
    body += std::string(131072 - body.size() - 1, 'y') + "\r\n.\r\n..\r\nend\r\n";
    for (const std::string& b : {body, std::string("no final newline\r\n.x"), std::string()}) {
        auto r = h.deliver(h.message(b, {"a@x.test"}, sink.nexthop()));
        CHECK(r.rcpts[0].code == 250);
    }
    REQUIRE(sink.msgs.size() == 3);
    CHECK(sink.msgs[0].data == broken_lines(body));
    CHECK(sink.msgs[0].wire.find("\r\n..after boundary\r\n") != std::string::npos);
    CHECK(sink.msgs[0].wire.rfind("\r\n..\r\n...\r\nend\r\n") != std::string::npos);
    CHECK(sink.msgs[1].data == "no final newline\r\n.x\r\n");
    CHECK(sink.msgs[1].wire == "no final newline\r\n..x\r\n");
    CHECK(sink.msgs[2].data.empty());
}

TEST_CASE("per-recipient 4xx and 5xx; RSET only after a half-finished transaction") {
    Harness h;
    Sink sink(h.io);
    sink.rcpt_reply["bad@x.test"] = "550 5.1.1 <bad@x.test>: Recipient address rejected";
    sink.rcpt_reply["later@x.test"] = "450 4.2.1 Mailbox busy";
    auto r = h.deliver(h.message(simple, {"bad@x.test", "ok@x.test", "later@x.test"}, sink.nexthop()));
    REQUIRE(r.rcpts.size() == 3);
    CHECK(r.rcpts[0].code == 550);
    CHECK(r.rcpts[0].enhanced == "5.1.1");
    CHECK(r.rcpts[0].text == "<bad@x.test>: Recipient address rejected");
    CHECK(r.rcpts[1].code == 250);
    CHECK(r.rcpts[2].code == 450);
    CHECK(r.rcpts[2].enhanced == "4.2.1");
    CHECK(sink.msgs.size() == 1);

    // All recipients refused: no message, the next transaction resets first.
    r = h.deliver(h.message(simple, {"bad@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 550);
    CHECK(sink.rsets == 0);
    r = h.deliver(h.message(simple, {"ok@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 250);
    CHECK(sink.rsets == 1);
    CHECK(sink.connections == 1);
    CHECK(sink.msgs.size() == 2);

    // A rejected message (final reply 5xx) needs no RSET.
    sink.final_reply = "554 5.7.1 Spam";
    r = h.deliver(h.message(simple, {"ok@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 554);
    CHECK(r.rcpts[0].text == "Spam");
    sink.final_reply = "250 2.0.0 Ok";
    r = h.deliver(h.message(simple, {"ok@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 250);
    CHECK(sink.rsets == 1);
}

TEST_CASE("MAIL FROM rejected applies to every recipient") {
    for (bool pipe : {true, false}) {
        Harness h;
        Sink sink(h.io);
        sink.pipelining = pipe;
        sink.mail_reply = "553 5.1.8 Sender domain does not exist";
        auto r = h.deliver(h.message(simple, {"a@x.test", "b@x.test"}, sink.nexthop()));
        for (const auto& rc : r.rcpts) {
            CHECK(rc.code == 553);
            CHECK(rc.enhanced == "5.1.8");
        }
        CHECK(sink.msgs.empty());
    }
}

TEST_CASE("connection refused gives 4xx for every recipient") {
    Harness h;
    std::uint16_t port;
    {
        asio::ip::tcp::acceptor a(h.io, {asio::ip::make_address("127.0.0.1"), 0});
        port = a.local_endpoint().port();
    }
    auto r = h.deliver(h.message(simple, {"a@x.test", "b@x.test"}, "[127.0.0.1]:" + std::to_string(port)));
    REQUIRE(r.rcpts.size() == 2);
    for (const auto& rc : r.rcpts) {
        CHECK(rc.code == 451);
        CHECK(rc.enhanced == "4.4.1");
        CHECK(rc.text == "connect to [127.0.0.1]:" + std::to_string(port) + ": Connection refused");
    }
    CHECK(r.relay.empty());
}

TEST_CASE("a server that stops answering times out with 4xx") {
    Harness h;
    h.cfg.client.command_timeout = 1s;
    Sink sink(h.io);
    sink.fault_on = ".";
    sink.fault_action = "hang";
    const auto t0 = std::chrono::steady_clock::now();
    auto r = h.deliver(h.message(simple, {"a@x.test"}, sink.nexthop()));
    const auto took = std::chrono::steady_clock::now() - t0;
    CHECK(took < 3s);
    CHECK(r.rcpts[0].code == 451);
    CHECK(r.rcpts[0].enhanced == "4.4.2");
    CHECK(r.rcpts[0].text.find("timed out while sending end of data") != std::string::npos);
    CHECK(h.cache.idle() == 0);
}

TEST_CASE("421 mid-session: unanswered recipients get 4xx, connection dropped") {
    Harness h;
    Sink sink(h.io);
    sink.rcpt_reply["bad@x.test"] = "550 5.1.1 no such user";
    sink.fault_on = "RCPT";
    sink.fault_nth = 3;
    sink.fault_action = "421 4.3.2 Shutting down";
    auto r = h.deliver(h.message(simple, {"bad@x.test", "ok@x.test", "third@x.test"}, sink.nexthop()));
    REQUIRE(r.rcpts.size() == 3);
    CHECK(r.rcpts[0].code == 550);  // answered before the 421
    CHECK(r.rcpts[1].code == 421);  // accepted, but the message never went out
    CHECK(r.rcpts[2].code == 421);
    CHECK(r.rcpts[2].enhanced == "4.3.2");
    CHECK(r.rcpts[2].text.find("Shutting down") != std::string::npos);
    CHECK(h.cache.idle() == 0);
    sink.fault_on.clear();
    r = h.deliver(h.message(simple, {"ok@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 250);
    CHECK(sink.connections == 2);
}

TEST_CASE("a cached connection the server closed is replaced transparently") {
    Harness h;
    Sink sink(h.io);
    sink.close_after_message = true;
    for (int i = 0; i < 3; ++i) {
        auto r = h.deliver(h.message(simple, {"a@x.test"}, sink.nexthop()));
        CHECK(r.rcpts[0].code == 250);
    }
    CHECK(sink.msgs.size() == 3);
    CHECK(sink.connections == 3);
}

TEST_CASE("idle connections are closed with QUIT after idle_timeout") {
    Harness h;
    h.cfg.client.idle_timeout = 1s;
    Sink sink(h.io);
    h.deliver(h.message(simple, {"a@x.test"}, sink.nexthop()));
    CHECK(h.cache.idle() == 1);
    h.settle(1500ms);
    CHECK(h.cache.idle() == 0);
    CHECK(sink.quits == 1);
}

TEST_CASE("max_msgs_per_connection caps reuse") {
    Harness h;
    h.cfg.client.max_msgs_per_connection = 2;
    Sink sink(h.io);
    for (int i = 0; i < 5; ++i) h.deliver(h.message(simple, {"a@x.test"}, sink.nexthop()));
    h.settle();
    CHECK(sink.msgs.size() == 5);
    CHECK(sink.connections == 3);
    CHECK(sink.quits == 2);
}

TEST_CASE("missing queue file gives 4xx without connecting") {
    Harness h;
    Sink sink(h.io);
    auto d = h.message(simple, {"a@x.test"}, sink.nexthop());
    fs::remove(smx::content::file_path(h.cfg.content_dir_abs(), d.content_id, true));
    auto r = h.deliver(d);
    CHECK(r.rcpts[0].code == 451);
    CHECK(r.rcpts[0].enhanced == "4.3.0");
    CHECK(r.rcpts[0].text == "queue file missing");
    CHECK(sink.connections == 0);
}

TEST_CASE("a queue file id that is not an id gives 4xx without connecting") {
    Harness h;
    Sink sink(h.io);
    auto d = h.message(simple, {"a@x.test"}, sink.nexthop());
    d.content_id = "../" + d.content_id.substr(3);
    auto r = h.deliver(d);
    CHECK(r.rcpts[0].code == 451);
    CHECK(r.rcpts[0].text == "bad queue file id");
    CHECK(sink.connections == 0);
}

TEST_CASE("a named literal next hop is looked up (hosts file) without MX") {
    Harness h;
    Sink sink(h.io);
    auto r = h.deliver(h.message(simple, {"a@x.test"}, "[localhost]:" + std::to_string(sink.port())));
    CHECK(r.rcpts[0].code == 250);
    CHECK(r.relay == "localhost[127.0.0.1]:" + std::to_string(sink.port()));
}

TEST_CASE("concurrent deliveries share the destination's connections") {
    Harness h;
    Sink sink(h.io);
    std::vector<smx::msg::Result> results;
    std::vector<smx::msg::Deliver> ds;  // deliver() keeps a reference
    for (int i = 0; i < 10; ++i) ds.push_back(h.message(simple, {"a@x.test"}, sink.nexthop()));
    for (const auto& d : ds) {
        asio::co_spawn(h.io, h.del.deliver(d), [&](std::exception_ptr, smx::msg::Result r) {
            results.push_back(std::move(r));
        });
    }
    while (results.size() < 10) h.io.run_one_for(100ms);
    for (const auto& r : results) CHECK(r.rcpts[0].code == 250);
    CHECK(sink.msgs.size() == 10);
    CHECK(h.cache.idle() == static_cast<std::size_t>(sink.connections));
    auto r = h.deliver(h.message(simple, {"a@x.test"}, sink.nexthop()));
    CHECK(r.rcpts[0].code == 250);
    CHECK(sink.connections <= 10);
}

TEST_CASE("fake QMGR: HELLO, DELIVERs in, RESULTs out") {
    Harness h;
    Sink sink(h.io);
    const std::string path = (h.dir.path / "qmgr.sock").string();
    asio::local::stream_protocol::acceptor acc(h.io, asio::local::stream_protocol::endpoint(path));
    auto d1 = h.message(simple, {"a@x.test"}, sink.nexthop());
    auto d2 = h.message(simple, {"b@x.test", "c@x.test"}, sink.nexthop());
    std::map<std::uint64_t, smx::msg::Result> got;
    std::string hello_role;

    // The QMGR side: accept, HELLO_ACK, two DELIVERs, collect RESULTs.
    asio::co_spawn(h.io, [&]() -> asio::awaitable<void> {
        auto [ec, s] = co_await acc.async_accept(asio::as_tuple(asio::use_awaitable));
        REQUIRE_FALSE(ec);
        auto ch = std::make_shared<smx::Channel>(std::move(s), "smtpc");
        ch->start();
        auto f = co_await ch->read();
        REQUIRE(f);
        std::string err;
        auto hello = smx::msg::decode<smx::msg::Hello>(*f, err);
        REQUIRE(hello);
        hello_role = hello->role;
        ch->send(smx::msg::encode(smx::msg::HelloAck{0, "ok"}));
        ch->send(smx::msg::encode(d1));
        ch->send(smx::msg::encode(d2));
        while (got.size() < 2) {
            auto rf = co_await ch->read();
            REQUIRE(rf);
            REQUIRE(rf->hdr.type == smx::msg::RESULT);
            auto r = smx::msg::decode<smx::msg::Result>(*rf, err);
            REQUIRE(r);
            got[r->da_id] = *r;
        }
        ch->close();  // QMGR goes away: serve_qmgr must return
    }, smx::crash_on_exception("fake QMGR"));

    bool served = h.run([&]() -> asio::awaitable<bool> {
        std::string err;
        auto ch = co_await smx::connect_qmgr(path, "smtpc", err);
        if (!ch) co_return false;
        co_await smx::smtpc::serve_qmgr(ch, h.del);
        co_return true;
    }());
    CHECK(served);
    CHECK(hello_role == "smtpc");
    REQUIRE(got.size() == 2);
    CHECK(got[d1.da_id].rcpts.size() == 1);
    CHECK(got[d2.da_id].rcpts.size() == 2);
    CHECK(got[d2.da_id].rcpts[1].idx == 1);
    CHECK(got[d2.da_id].rcpts[1].code == 250);
    CHECK(sink.msgs.size() == 2);
}

namespace {

// A tiny authoritative DNS server on UDP 127.0.0.1 for the MX tests:
//   mx.test    MX 20 b.mx.test, MX 10 a.mx.test (a has no listener)
//   a.mx.test  A 127.0.0.2      b.mx.test  A 127.0.0.1
//   nomx.test  no MX; A 127.0.0.1
//   null.test  MX 0 "."
// and what a test adds (mx, a, servfail). A name in `servfail` gets SERVFAIL
// for every type, one without records NXDOMAIN, one without records of the
// type asked NODATA.
class FakeDns {
public:
    explicit FakeDns(asio::io_context& io) : sock_(io, {asio::ip::make_address("127.0.0.1"), 0}) {
        mx("mx.test", {{20, "b.mx.test"}, {10, "a.mx.test"}});
        a("a.mx.test", "127.0.0.2");
        a("b.mx.test", "127.0.0.1");
        a("nomx.test", "127.0.0.1");
        zone_["null.test"][15] = {rr(15, u16(0) + std::string(1, '\0'))};
        asio::co_spawn(io, serve(), smx::crash_on_exception("fake DNS"));
    }
    std::string server() const { return "127.0.0.1:" + std::to_string(sock_.local_endpoint().port()); }
    void mx(const std::string& name, const std::vector<std::pair<unsigned, std::string>>& hosts) {
        for (const auto& [pref, host] : hosts) zone_[name][15].push_back(rr(15, u16(pref) + encode_name(host)));
    }
    void a(const std::string& name, const std::string& ip) {
        const auto b = asio::ip::make_address_v4(ip).to_bytes();
        zone_[name][1].push_back(rr(1, std::string(b.begin(), b.end())));
    }
    std::set<std::string> servfail;
    int queries = 0;

private:
    static std::string encode_name(const std::string& n) {
        std::string out;
        std::size_t start = 0;
        while (start < n.size()) {
            auto dot = n.find('.', start);
            if (dot == std::string::npos) dot = n.size();
            out += static_cast<char>(dot - start);
            out += n.substr(start, dot - start);
            start = dot + 1;
        }
        return out + '\0';
    }
    static std::string u16(unsigned v) { return {static_cast<char>(v >> 8), static_cast<char>(v & 255)}; }
    static std::string rr(unsigned type, const std::string& rdata) {
        return "\xC0\x0C" + u16(type) + u16(1) + std::string("\0\0\x01\x2C", 4) + u16(rdata.size()) + rdata;
    }

    asio::awaitable<void> serve() {
        char buf[512];
        for (;;) {
            asio::ip::udp::endpoint from;
            auto [ec, n] = co_await sock_.async_receive_from(asio::buffer(buf), from,
                                                             asio::as_tuple(asio::use_awaitable));
            if (ec) co_return;
            if (n < 17) continue;
            ++queries;
            std::string name;
            std::size_t off = 12;
            while (off < n && buf[off] != 0) {
                const std::size_t len = static_cast<unsigned char>(buf[off]);
                if (!name.empty()) name += '.';
                name.append(buf + off + 1, len);
                off += len + 1;
            }
            const unsigned type = (static_cast<unsigned char>(buf[off + 1]) << 8) |
                                  static_cast<unsigned char>(buf[off + 2]);
            const std::string question(buf + 12, off + 5 - 12);
            std::vector<std::string> answers;
            unsigned rcode = 0;
            if (servfail.contains(name)) {
                rcode = 2;
            } else if (auto it = zone_.find(name); it == zone_.end()) {
                rcode = 3;
            } else if (auto rrs = it->second.find(type); rrs != it->second.end()) {
                answers = rrs->second;
            }
            std::string resp(buf, 2);
            resp += u16(0x8580 | rcode) + u16(1) + u16(answers.size()) + u16(0) + u16(0);
            resp += question;
            for (const auto& a : answers) resp += a;
            co_await sock_.async_send_to(asio::buffer(resp), from, asio::as_tuple(asio::use_awaitable));
        }
    }

    asio::ip::udp::socket sock_;
    std::map<std::string, std::map<unsigned, std::vector<std::string>>> zone_;  // name, type
};

} // namespace

TEST_CASE("MX lookup through c-ares: preference order, fallback, cache, NXDOMAIN, nullMX") {
    Harness h;
    FakeDns dns(h.io);
    REQUIRE(h.dns.set_servers(dns.server()));
    Sink sink(h.io);
    const std::string port = std::to_string(sink.port());

    // a.mx.test (preference 10) refuses; b.mx.test takes the message.
    auto r = h.deliver(h.message(simple, {"u@mx.test"}, "mx.test:" + port));
    REQUIRE(r.rcpts.size() == 1);
    CHECK(r.rcpts[0].code == 250);
    CHECK(r.relay == "b.mx.test[127.0.0.1]:" + port);
    const int after_first = dns.queries;
    CHECK(after_first >= 3);

    // Cached answers: no new queries (the session is reused anyway, so ask
    // the resolver directly).
    auto t = h.run(h.dns.targets("mx.test:" + port, ""));
    REQUIRE(t.list.size() == 2);
    CHECK(t.list[0].host == "a.mx.test");
    CHECK(t.list[1].host == "b.mx.test");
    CHECK(dns.queries == after_first);

    // No MX records: the host's own address.
    t = h.run(h.dns.targets("mx", "nomx.test"));
    REQUIRE(t.list.size() == 1);
    CHECK(t.list[0].ep.address().to_string() == "127.0.0.1");
    CHECK(t.list[0].ep.port() == 25);

    t = h.run(h.dns.targets("mx", "nxdomain.test"));
    CHECK(t.list.empty());
    CHECK(t.err.code == 550);
    CHECK(t.err.enhanced == "5.1.2");

    t = h.run(h.dns.targets("mx", "null.test"));
    CHECK(t.list.empty());
    CHECK(t.err.code == 556);
}

TEST_CASE("an unreachable name server is a 4xx DNS failure") {
    Harness h;
    std::uint16_t port;
    {
        asio::ip::udp::socket s(h.io, {asio::ip::make_address("127.0.0.1"), 0});
        port = s.local_endpoint().port();
    }
    REQUIRE(h.dns.set_servers("127.0.0.1:" + std::to_string(port)));
    auto r = h.deliver(h.message(simple, {"u@example.test"}, "mx"));
    CHECK(r.rcpts[0].code == 451);
    CHECK(r.rcpts[0].enhanced == "4.4.3");
}

// The names of the DNS precedence tests: sf.host.test fails (SERVFAIL),
// nx.host.test and nx2.host.test do not exist, me.test is our hostname,
// self.host.test has our listen address.
struct PrecedenceDns {
    explicit PrecedenceDns(Harness& h) : dns(h.io) {
        h.cfg.server.hostname = "me.test";
        h.cfg.server.listen = {{"127.0.0.1", 25, true}};
        REQUIRE(h.dns.configure(h.cfg));
        REQUIRE(h.dns.set_servers(dns.server()));
        dns.servfail = {"sf.host.test", "sfmx.test"};
        dns.a("self.host.test", "127.0.0.1");
        dns.a("other.host.test", "127.0.0.3");
        dns.mx("sfnx.test", {{10, "sf.host.test"}, {20, "nx.host.test"}});
        dns.mx("nxsf.test", {{10, "nx.host.test"}, {20, "sf.host.test"}});
        dns.mx("nxnx.test", {{10, "nx.host.test"}, {20, "nx2.host.test"}});
        dns.mx("backup-sf.test", {{10, "sf.host.test"}, {20, "me.test"}});
        dns.mx("backup-nx.test", {{10, "nx.host.test"}, {20, "self.host.test"}});
        dns.mx("best.test", {{10, "self.host.test"}, {20, "other.host.test"}});
        dns.mx("equal-best.test", {{10, "nx.host.test"}, {10, "me.test"}});
    }
    FakeDns dns;
};

TEST_CASE("a temporary DNS failure of one MX host outranks a permanent one of another") {
    Harness h;
    PrecedenceDns z(h);
    for (const char* domain : {"sfnx.test", "nxsf.test"}) {
        INFO(domain);
        auto t = h.run(h.dns.targets("mx", domain));
        CHECK(t.list.empty());
        CHECK(t.err.code == 451);
        CHECK(t.err.enhanced == "4.4.3");
        CHECK(t.err.text.find("name=sf.host.test type=A") != std::string::npos);
    }
    // Only definite answers: bounced, and an MX host that does not exist is
    // unable to route (5.4.4), not a bad domain.
    auto t = h.run(h.dns.targets("mx", "nxnx.test"));
    CHECK(t.err.code == 550);
    CHECK(t.err.enhanced == "5.4.4");
    t = h.run(h.dns.targets("mx", "sfmx.test"));
    CHECK(t.err.code == 451);
    CHECK(t.err.text.find("type=MX") != std::string::npos);
}

TEST_CASE("a backup MX whose better hosts fail defers 4.4.4; the best MX loops 5.4.6") {
    Harness h;
    PrecedenceDns z(h);
    // We are MX 20 by name, and by address.
    for (const char* domain : {"backup-sf.test", "backup-nx.test"}) {
        INFO(domain);
        auto t = h.run(h.dns.targets("mx", domain));
        CHECK(t.list.empty());
        CHECK(t.err.code == 451);
        CHECK(t.err.enhanced == "4.4.4");
        CHECK(t.err.text == std::string("unable to find primary relay for ") + domain);
    }
    for (const char* domain : {"best.test", "equal-best.test"}) {
        INFO(domain);
        auto t = h.run(h.dns.targets("mx", domain));
        CHECK(t.list.empty());
        CHECK(t.err.code == 554);
        CHECK(t.err.enhanced == "5.4.6");
        CHECK(t.err.text == std::string("mail for ") + domain + " loops back to myself");
    }
}

TEST_CASE("a temporary failure of one next hop is not replaced by a later permanent one") {
    Harness h;
    PrecedenceDns z(h);
    for (const auto& hops : {std::vector<std::string>{"[sf.host.test]:25", "[nx.host.test]:25"},
                             std::vector<std::string>{"[nx.host.test]:25", "[sf.host.test]:25"}}) {
        INFO(hops[0]);
        auto d = h.message(simple, {"a@x.test", "b@x.test"}, "");
        d.nexthops = hops;
        auto r = h.deliver(d);
        REQUIRE(r.rcpts.size() == 2);
        for (const auto& x : r.rcpts) {
            CHECK(x.code == 451);
            CHECK(x.enhanced == "4.4.3");
            CHECK(x.text.find("name=sf.host.test") != std::string::npos);
        }
    }
    auto d = h.message(simple, {"a@x.test"}, "[nx.host.test]:25");
    auto r = h.deliver(d);
    CHECK(r.rcpts[0].code == 550);
    CHECK(r.rcpts[0].enhanced == "5.4.4");
}

// Hidden (run with "[.perf]"): client and sink share one thread, so this
// is a lower bound for SMTPC's own throughput.
TEST_CASE("throughput over cached connections", "[.perf]") {
    Harness h;
    Sink sink(h.io);
    const std::string body = simple + std::string(2000, 'x') + "\r\n";
    std::vector<smx::msg::Deliver> ds;
    for (int i = 0; i < 5000; ++i) ds.push_back(h.message(body, {"a@x.test", "b@x.test"}, sink.nexthop()));
    std::size_t done = 0, next = 0;
    std::function<void()> spawn = [&] {
        asio::co_spawn(h.io, h.del.deliver(ds[next++]), [&](std::exception_ptr, smx::msg::Result r) {
            CHECK(r.rcpts[0].code == 250);
            ++done;
            if (next < ds.size()) spawn();
        });
    };
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 20; ++i) spawn();
    while (done < ds.size()) h.io.run_one();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    WARN(ds.size() / s << " msgs/s over " << sink.connections << " connections");
}

TEST_CASE("fit_result shortens texts until the RESULT fits its record, dropping no recipient") {
    smx::msg::Result r;
    r.da_id = 7;
    r.relay = "mx[192.0.2.1]:25";
    for (std::uint32_t i = 0; i < 20; ++i)
        r.rcpts.push_back({i, 550, "5.1.1", std::string(1 << 20, 'x')});
    smx::smtpc::fit_result(r);
    REQUIRE(r.rcpts.size() == 20);
    CHECK(smx::msg::encode(r, r.da_id).size() <= smx::rec::max_body);
    for (const auto& x : r.rcpts) CHECK(x.text.size() >= 32);
    smx::msg::Result small{8, "", {{0, 250, "2.0.0", "Ok"}}};
    smx::smtpc::fit_result(small);
    CHECK(small.rcpts[0].text == "Ok");
    smx::msg::Result many{9, "", {}};
    for (std::uint32_t i = 0; i < 40000; ++i)
        many.rcpts.push_back({i, 451, "4.0.0", std::string(200, 'y')});
    smx::smtpc::fit_result(many);
    CHECK(smx::msg::encode(many, 9).size() <= smx::rec::max_body);
}
