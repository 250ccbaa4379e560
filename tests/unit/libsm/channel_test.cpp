// The record channel over a real socketpair: batching, a truncated frame, and
// an over-size frame that fails only its own request.
#include "libsm/channel.hpp"
#include "libsm/panic.hpp"

#include <catch2/catch.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

using namespace smx;
namespace asio = boost::asio;

namespace {

struct Pair {
    asio::io_context io;
    unix_socket a{io}, b{io};
    Pair() { asio::local::connect_pair(a, b); }
};

// Reads frames from b until EOF (or n frames) while `feed` writes raw bytes to a.
std::vector<std::optional<rec::Frame>> read_all(Pair& p, std::string feed, std::size_t n) {
    std::vector<std::optional<rec::Frame>> out;
    auto ch = std::make_shared<Channel>(std::move(p.b), "test");
    ch->start();
    asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
        co_await asio::async_write(p.a, asio::buffer(feed), asio::use_awaitable);
        p.a.shutdown(unix_socket::shutdown_send);
    }, crash_on_exception("test writer"));
    asio::co_spawn(p.io, [&]() -> asio::awaitable<void> {
        while (out.size() < n) {
            auto f = co_await ch->read();
            out.push_back(std::move(f));
            if (!out.back()) break;
        }
        ch->close();
    }, crash_on_exception("test reader"));
    p.io.run_for(std::chrono::seconds(20));
    return out;
}

std::string header(std::uint32_t len, std::uint16_t type, std::uint64_t req) {
    return rec::put_u32(len) + rec::put_u16(type) + rec::put_u16(0) + rec::put_u64(req);
}

} // namespace

TEST_CASE("an over-size frame is skipped and reported with its request id") {
    Pair p;
    const std::string small = msg::encode(msg::TaAck{"A", msg::AckStatus::ok, ""}, 5);
    std::string feed = small;
    feed += header(rec::max_body + 10, msg::TA_COMMIT, 42) + std::string(rec::max_body + 10, 'x');
    feed += small;
    auto got = read_all(p, feed, 3);
    REQUIRE(got.size() == 3);
    REQUIRE(got[0]);
    CHECK(got[0]->hdr.req_id == 5);
    CHECK_FALSE(got[0]->oversize);
    REQUIRE(got[1]);
    CHECK(got[1]->oversize);
    CHECK(got[1]->hdr.req_id == 42);
    CHECK(got[1]->hdr.type == msg::TA_COMMIT);
    CHECK(got[1]->body.empty());
    REQUIRE(got[2]);  // the stream is still in step after it
    CHECK(got[2]->hdr.req_id == 5);
    CHECK(got[2]->body == small.substr(rec::header_size));
}

TEST_CASE("a frame larger than the read buffer arrives whole, between small ones") {
    Pair p;
    const std::string small = msg::encode(msg::TaAck{"A", msg::AckStatus::ok, ""}, 5);
    std::string big_body(1u << 20, 'b');  // 16 times the 64 KiB the buffer starts with
    big_body[0] = 'B';
    big_body.back() = 'E';
    const std::string feed = small + header(static_cast<std::uint32_t>(big_body.size()),
                                            msg::TA_COMMIT, 7) + big_body + small;
    auto got = read_all(p, feed, 3);
    REQUIRE(got.size() == 3);
    REQUIRE(got[1]);
    CHECK_FALSE(got[1]->oversize);
    CHECK(got[1]->hdr.req_id == 7);
    CHECK(got[1]->body == big_body);
    REQUIRE(got[2]);
    CHECK(got[2]->body == small.substr(rec::header_size));
}

TEST_CASE("a length beyond max_skip drops the link") {
    Pair p;
    auto got = read_all(p, header(rec::max_skip + 1, msg::TA_COMMIT, 1) + "abc", 2);
    REQUIRE(got.size() == 1);
    CHECK_FALSE(got[0]);
}

TEST_CASE("a frame cut short by EOF is not returned") {
    Pair p;
    const std::string f = msg::encode(msg::TaAck{"A", msg::AckStatus::ok, "text"}, 9);
    auto got = read_all(p, f + f.substr(0, f.size() - 3), 3);
    REQUIRE(got.size() == 2);
    CHECK(got[0]);
    CHECK_FALSE(got[1]);
}

TEST_CASE("many frames sent at once arrive in order") {
    Pair p;
    std::string feed;
    for (std::uint64_t i = 1; i <= 500; ++i)
        feed += msg::encode(msg::TaAck{"id" + std::to_string(i), msg::AckStatus::ok, ""}, i);
    auto got = read_all(p, feed, 500);
    REQUIRE(got.size() == 500);
    for (std::uint64_t i = 0; i < 500; ++i) {
        REQUIRE(got[i]);
        CHECK(got[i]->hdr.req_id == i + 1);
    }
}

TEST_CASE("building a record over the frame limit is a bug") {
    // Writer::frame panics (abort): checked in a child process.
    const pid_t pid = ::fork();
    if (pid == 0) {
        std::signal(SIGABRT, SIG_DFL);  // not Catch2's handler: just die
        rec::Writer w;
        w.str(1, std::string(rec::max_body + 1, 'x'));
        (void)w.frame(1, 0);
        ::_exit(0);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGABRT);
}
