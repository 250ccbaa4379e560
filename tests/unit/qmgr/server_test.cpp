// QMGR's socket server over its real Unix socket: a peer that breaks the
// HELLO rules is refused (HELLO_ACK with the reason, then closed) or dropped,
// and the server goes on serving the next peer.
#include "qmgr/server.hpp"
#include "tests/unit/qmgr/harness.hpp"

#include <catch2/catch.hpp>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

using namespace qmgr_test;

namespace {

// A raw client: writes bytes as given, reads without blocking so the test
// thread can run QMGR's event loop meanwhile.
struct Client {
    int fd = -1;
    std::string in;
    bool eof = false;

    explicit Client(const std::string& path) {
        fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        REQUIRE(fd >= 0);
        sockaddr_un a{};
        a.sun_family = AF_UNIX;
        REQUIRE(path.size() < sizeof a.sun_path);
        std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
        REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    }
    ~Client() { ::close(fd); }
    void send(const std::string& bytes) {
        REQUIRE(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
                static_cast<ssize_t>(bytes.size()));
    }
    void poll() {
        char buf[4096];
        for (;;) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) in.append(buf, static_cast<std::size_t>(n));
            else {
                if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) eof = true;
                return;
            }
        }
    }
    bool has_frame() {
        poll();
        if (in.size() < smx::rec::header_size) return false;
        const auto h = smx::rec::parse_header(in.substr(0, smx::rec::header_size));
        return h && in.size() >= smx::rec::header_size + h->length;
    }
    template <class T>
    T take() {
        REQUIRE(has_frame());
        const auto h = *smx::rec::parse_header(in.substr(0, smx::rec::header_size));
        const std::size_t n = smx::rec::header_size + h.length;
        T v = decode_frame<T>(in.substr(0, n));
        in.erase(0, n);
        return v;
    }
};

struct Served : Harness {
    Server srv{io(), cfg, *q};
    std::string path;
    Served() {
        std::string err;
        REQUIRE(srv.listen(err));
        path = cfg.qmgr_socket();
    }
    ~Served() { srv.stop(); }
    // The HELLO_ACK a peer gets for its first bytes.
    smx::msg::HelloAck hello(Client& c, const std::string& bytes) {
        c.send(bytes);
        REQUIRE(run_until([&] { return c.has_frame(); }));
        return c.take<smx::msg::HelloAck>();
    }
    // A well-behaved CLI peer still gets its HELLO_ACK and a stats reply.
    void still_serving() {
        Client c(path);
        CHECK(hello(c, smx::msg::encode(smx::msg::Hello{"cli", smx::msg::protocol_version, 1})).status == 0);
        c.send(smx::msg::encode(smx::msg::CtlRequest{"stats", {}}, 3));
        REQUIRE(run_until([&] { return c.has_frame(); }));
        const auto r = c.take<smx::msg::CtlReply>();
        CHECK(r.status == 0);
        CHECK(r.text.find("received") != std::string::npos);
    }
};

} // namespace

TEST_CASE("server: a HELLO with an unknown role is refused and the peer closed") {
    Served s;
    Client bad(s.path);
    const auto ack = s.hello(bad, smx::msg::encode(smx::msg::Hello{"mta", smx::msg::protocol_version, 1}));
    CHECK(ack.status == 1);
    CHECK(ack.text == "unknown role");
    // The server waits briefly for the peer to hang up, then closes itself.
    CHECK(s.run_until([&] { bad.poll(); return bad.eof; }, 4000ms));
    s.still_serving();
}

TEST_CASE("server: a HELLO with another protocol version is refused") {
    Served s;
    Client bad(s.path);
    const auto ack = s.hello(bad, smx::msg::encode(smx::msg::Hello{"smtps", smx::msg::protocol_version + 1, 1}));
    CHECK(ack.status == 1);
    CHECK(ack.text == "protocol version " + std::to_string(smx::msg::protocol_version + 1) +
                          " not supported (qmgr speaks " + std::to_string(smx::msg::protocol_version) + ")");
    s.still_serving();
}

TEST_CASE("server: a first record that is not HELLO is a protocol error") {
    Served s;
    Client bad(s.path);
    const auto ack = s.hello(bad, smx::msg::encode(smx::msg::CtlRequest{"stats", {}}, 1));
    CHECK(ack.status == 1);
    CHECK(ack.text == "protocol error: expected HELLO, got record type " +
                          std::to_string(smx::msg::CTL_REQ));
    s.still_serving();
}

TEST_CASE("server: a frame cut short by EOF gets no answer, only a close") {
    Served s;
    Client bad(s.path);
    const std::string hello = smx::msg::encode(smx::msg::Hello{"cli", smx::msg::protocol_version, 1});
    bad.send(hello.substr(0, hello.size() - 2));
    ::shutdown(bad.fd, SHUT_WR);
    REQUIRE(s.run_until([&] { bad.poll(); return bad.eof; }));
    CHECK(bad.in.empty());
    s.still_serving();
}

TEST_CASE("server: a peer that stays silent does not hold up others") {
    Served s;
    Client silent(s.path);
    s.still_serving();
    silent.poll();
    CHECK(silent.in.empty());
    CHECK_FALSE(silent.eof);
}

TEST_CASE("server: SMTPS links report their loops' load to smx stats; a bad report drops the link") {
    Served s;
    auto stats = [&] {
        Client c(s.path);
        REQUIRE(s.hello(c, smx::msg::encode(smx::msg::Hello{"cli", smx::msg::protocol_version, 1})).status == 0);
        c.send(smx::msg::encode(smx::msg::CtlRequest{"stats", {}}, 3));
        REQUIRE(s.run_until([&] { return c.has_frame(); }));
        return c.take<smx::msg::CtlReply>().text;
    };
    auto has = [&](const std::string& line) { return ("\n" + stats()).find("\n" + line + "\n") != std::string::npos; };
    const auto smtps_hello = smx::msg::encode(smx::msg::Hello{"smtps", smx::msg::protocol_version, 1});
    {
        Client a(s.path), b(s.path);
        REQUIRE(s.hello(a, smtps_hello).status == 0);
        REQUIRE(s.hello(b, smtps_hello).status == 0);
        smx::msg::SmtpsLoad la{0, 30, 5, 2}, lb{1, 12, 1, 0};
        la.rejected = {{smx::Rejection::relay_denied, 5, 2}};
        lb.rejected = {{smx::Rejection::relay_denied, 5, 1}, {smx::Rejection::too_many_errors, 4, 1}};
        a.send(smx::msg::encode(la));
        b.send(smx::msg::encode(lb));
        CHECK(s.run_until([&] { return has("smtps_sessions 42"); }));
        // Refusals are added up, per reason and class.
        CHECK(has("rejected 4"));
        CHECK(has("rejected_5xx_relay_denied 3"));
        CHECK(has("rejected_4xx_too_many_errors 1"));
        CHECK(has("smtps_connections 2"));
        CHECK(has("smtps_transactions 6"));
        CHECK(has("smtps_transactions_waiting 2"));
        CHECK(has("smtps_loop_0_sessions 30"));
        CHECK(has("smtps_loop_1_sessions 12"));
        // A newer report replaces the link's last one.
        a.send(smx::msg::encode(smx::msg::SmtpsLoad{0, 3, 0, 0}));
        CHECK(s.run_until([&] { return has("smtps_sessions 15"); }));
        // A report without its counts is a protocol error: the link goes,
        // and with it what it reported.
        a.send(smx::rec::Writer().u32(1, 0).frame(smx::msg::SMTPS_LOAD, 0));
        CHECK(s.run_until([&] { a.poll(); return a.eof; }, 4000ms));
        CHECK(s.run_until([&] { return has("smtps_sessions 12"); }));
        CHECK(has("smtps_connections 1"));
        CHECK_FALSE(has("smtps_loop_0_sessions 3"));
        // The refusals it reported stay counted: a counter never goes down.
        CHECK(has("rejected_5xx_relay_denied 3"));
    }
    // An oversize report is refused too: the link is dropped.
    {
        Client c(s.path);
        REQUIRE(s.hello(c, smtps_hello).status == 0);
        c.send(smx::msg::encode(smx::msg::SmtpsLoad{0, 7, 0, 0}));
        CHECK(s.run_until([&] { return has("smtps_sessions 7"); }));
        // By hand: rec::Writer refuses to build a frame over the limit.
        const std::string frame = smx::rec::put_u32(smx::rec::max_body + 1) +
                                  smx::rec::put_u16(smx::msg::SMTPS_LOAD) + smx::rec::put_u16(0) +
                                  smx::rec::put_u64(0) + std::string(smx::rec::max_body + 1, 'x');
        // More than a socket buffer: written by a thread while this one
        // runs QMGR's loop, which reads past it.
        std::thread writer([&] {
            for (std::size_t off = 0; off < frame.size();) {
                const ssize_t n = ::send(c.fd, frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
                if (n <= 0) return;
                off += static_cast<std::size_t>(n);
            }
        });
        CHECK(s.run_until([&] { c.poll(); return c.eof; }, 4000ms));
        writer.join();
        CHECK(s.run_until([&] { return has("smtps_connections 0"); }));
    }
    // Both gone: nothing left of them.
    CHECK(s.run_until([&] { return has("smtps_connections 0"); }));
    CHECK(has("smtps_sessions 0"));
    CHECK(stats().find("smtps_loop_") == std::string::npos);
}
