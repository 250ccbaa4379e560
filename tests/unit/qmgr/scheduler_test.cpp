// Scheduler and backoff: the parts of QMGR that decide what goes where and
// when, driven without sockets (routing: routing_test.cpp).
#include "qmgr/qmgr.hpp"
#include "qmgr/queue.hpp"
#include "qmgr/routing.hpp"
#include "qmgr/scheduler.hpp"

#include "libsm/ids.hpp"
#include "tests/unit/qmgr/envelope.hpp"
#include "tests/unit/qmgr/fake_clock.hpp"

#include <catch2/catch.hpp>

namespace asio = boost::asio;
using namespace smx::qmgr;

namespace {

struct Suspended {
    std::string ta_id;
    std::uint32_t idx;
    smx::msg::Reply why;
};

// A scheduler with captured DELIVERs per link.
struct Fixture {
    asio::io_context io;
    FakeClock clock;
    std::vector<Suspended> suspended;
    ActiveQueue q;  // before sched, which keeps a reference to it
    Scheduler sched;
    std::vector<std::vector<smx::msg::Deliver>> sent;  // per link index
    std::vector<std::string> nexthops{"[127.0.0.1]:2600"};
    Destination dest{"[127.0.0.1]:2600", &nexthops};

    explicit Fixture(SchedulerOptions o = opts())
        : sched(io.get_executor(), q, o,
                [this](Ta& ta, std::uint32_t idx, const smx::msg::Reply& why, std::uint64_t) {
                    suspended.push_back({ta.id, idx, why});
                },
                clock) {}

    static SchedulerOptions opts() {
        SchedulerOptions o;
        o.initial_concurrency = 2;
        o.max_concurrency = 4;
        return o;
    }
    std::uint64_t link() {
        const std::size_t i = sent.size();
        sent.emplace_back();
        return sched.add_link([this, i](std::string frame) {
            smx::rec::Frame f{*smx::rec::parse_header(frame.substr(0, smx::rec::header_size)),
                             frame.substr(smx::rec::header_size)};
            std::string err;
            auto d = smx::msg::decode<smx::msg::Deliver>(f, err);
            REQUIRE(d);
            sent[i].push_back(*d);
        });
    }
    Ta& submit(std::vector<std::string> rcpts) {
        Ta* ta = q.admit(envelope(std::move(rcpts)));
        std::vector<std::uint32_t> idx;
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i) idx.push_back(i);
        sched.submit(*ta, dest, idx);
        return *ta;
    }
    void pump() { io.poll(); io.restart(); }
};

} // namespace

TEST_CASE("backoff doubles from retry_min up to retry_max") {
    smx::QueueConfig q;
    q.retry_min = std::chrono::seconds(300);
    q.retry_max = std::chrono::seconds(3600);
    using std::chrono::seconds;
    CHECK(backoff(q, 1) == seconds(300));
    CHECK(backoff(q, 2) == seconds(600));
    CHECK(backoff(q, 4) == seconds(2400));
    CHECK(backoff(q, 5) == seconds(3600));
    CHECK(backoff(q, 1000) == seconds(3600));
}

TEST_CASE("connection failures: no relay, or every recipient 421") {
    smx::msg::Result r;
    r.rcpts = {{0, 451, "4.4.1", "connect refused"}};
    CHECK(connection_failed(r));
    r.relay = "h[127.0.0.1]:25";
    CHECK_FALSE(connection_failed(r));
    r.rcpts = {{0, 421, "", "busy"}, {1, 421, "", "busy"}};
    CHECK(connection_failed(r));
    CHECK(smx::msg::to_string(smx::msg::RcptResult{0, 250, "2.0.0", "Ok"}.reply()) == "250 2.0.0 Ok");
    CHECK(smx::msg::to_string(smx::msg::RcptResult{0, 250, "", "Ok"}.reply()) == "250 Ok");
}

TEST_CASE("recipients of one message to one destination share a DELIVER") {
    Fixture f;
    f.link();
    Ta& ta = f.submit({"a@example.net", "b@example.net", "c@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 1);
    const auto& d = f.sent[0][0];
    CHECK(d.ta_id == ta.id);
    CHECK(d.rcpts.size() == 3);
    CHECK(d.rcpts[2].idx == 2);
    CHECK(d.rcpts[2].addr == "c@example.net");
    CHECK(d.nexthops == f.nexthops);
    CHECK(ta.rcpt(1).state() == RcptState::inflight);
}

TEST_CASE("large recipient lists are split per delivery") {
    auto o = Fixture::opts();
    o.max_rcpts_per_delivery = 2;
    Fixture f(o);
    f.link();
    f.submit({"a@x", "b@x", "c@x", "d@x", "e@x"});
    f.pump();
    REQUIRE(f.sent[0].size() == 2);  // window 2
    CHECK(f.sent[0][0].rcpts.size() == 2);
}

TEST_CASE("the window starts at initial_concurrency and grows on success") {
    Fixture f;
    auto l = f.link();
    for (int i = 0; i < 10; ++i) f.submit({"a@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 2);
    CHECK(f.sched.window(f.dest.key) == 2);
    CHECK(f.sched.active_deliveries() == 2);
    REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, false, {}));
    CHECK(f.sched.window(f.dest.key) == Approx(2.5));
    f.pump();
    CHECK(f.sent[0].size() == 3);  // one slot freed, window still < 3
    REQUIRE(f.sched.complete(l, f.sent[0][1].da_id, false, {}));
    CHECK(f.sched.window(f.dest.key) == Approx(2.9));
    REQUIRE(f.sched.complete(l, f.sent[0][2].da_id, false, {}));
    CHECK(f.sched.window(f.dest.key) > 3);
    f.pump();
    CHECK(f.sched.active_deliveries() == 3);
    // Grows no further than max_concurrency.
    for (int i = 0; i < 50; ++i) {
        f.submit({"a@example.net"});
        f.pump();
        auto& last = f.sent[0].back();
        f.sched.complete(l, last.da_id, false, {});
    }
    CHECK(f.sched.window(f.dest.key) == Approx(4));
}

TEST_CASE("failures shrink the window; a failed cohort marks the destination dead") {
    Fixture f;
    auto l = f.link();
    for (int i = 0; i < 6; ++i) f.submit({"a@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 2);
    REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, true, {451, "4.4.1", "connect refused"}));
    CHECK(f.sched.window(f.dest.key) == 1);
    CHECK_FALSE(f.sched.dead(f.dest.key));
    f.pump();
    CHECK(f.sent[0].size() == 2);  // window 1, one still active
    // 1/2 + 1/1 of a cohort: dead, and the 5 waiting messages (the 4 never
    // sent and the refused one, back in the queue) are suspended.
    REQUIRE(f.sched.complete(l, f.sent[0][1].da_id, true, {451, "4.4.1", "connect refused"}));
    CHECK(f.sched.dead(f.dest.key));
    CHECK(f.sched.dead_destinations() == 1);
    REQUIRE(f.suspended.size() == 5);
    // Our own reason (no code), in the class of the reply that made it dead.
    CHECK(f.suspended[0].why ==
          smx::msg::Reply{0, "4.4.1", "delivery temporarily suspended: 451 4.4.1 connect refused"});
    // New mail for a dead destination is suspended at once.
    f.submit({"b@example.net"});
    f.pump();
    CHECK(f.suspended.size() == 6);
    CHECK(f.sent[0].size() == 2);
    f.clock.advance(std::chrono::seconds(301));  // dead_time
    CHECK(f.sched.dead_destinations() == 0);
}

TEST_CASE("a dead destination is tried again once dead_time has passed") {
    auto o = Fixture::opts();
    o.dead_time = std::chrono::hours(1);
    Fixture f(o);
    auto l = f.link();
    f.submit({"a@example.net"});
    f.submit({"b@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 2);
    REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, true, {451, "4.4.1", "connect refused"}));
    REQUIRE(f.sched.complete(l, f.sent[0][1].da_id, true, {451, "4.4.1", "connect refused"}));
    REQUIRE(f.sched.dead(f.dest.key));
    CHECK(f.suspended.size() == 1);  // a, refused first and put back
    f.clock.advance(std::chrono::minutes(59));
    f.submit({"c@example.net"});
    f.pump();
    CHECK(f.suspended.size() == 2);  // still dead a minute before dead_time
    CHECK(f.sent[0].size() == 2);
    f.clock.advance(std::chrono::minutes(1));
    f.submit({"d@example.net"});
    f.pump();
    CHECK_FALSE(f.sched.dead(f.dest.key));
    CHECK(f.suspended.size() == 2);
    REQUIRE(f.sent[0].size() == 3);
    CHECK(f.sent[0][2].rcpts[0].addr == "d@example.net");
}

TEST_CASE("a success resets the failure count") {
    Fixture f;
    auto l = f.link();
    for (int i = 0; i < 4; ++i) f.submit({"a@example.net"});
    f.pump();
    f.sched.complete(l, f.sent[0][0].da_id, true, {0, {}, "x"});
    f.sched.complete(l, f.sent[0][1].da_id, false, {});
    f.pump();
    REQUIRE(f.sent[0].size() >= 3);
    f.sched.complete(l, f.sent[0][2].da_id, true, {0, {}, "x"});
    CHECK_FALSE(f.sched.dead(f.dest.key));
}

TEST_CASE("DELIVERs are spread over the SMTPC links") {
    auto o = Fixture::opts();
    o.initial_concurrency = 10;
    o.max_concurrency = 10;
    Fixture f(o);
    f.link();
    f.link();
    for (int i = 0; i < 10; ++i) f.submit({"a@example.net"});
    f.pump();
    CHECK(f.sent[0].size() == 5);
    CHECK(f.sent[1].size() == 5);
}

TEST_CASE("work waits without a link; a lost link's deliveries are requeued") {
    Fixture f;
    Ta& ta = f.submit({"a@example.net"});
    f.pump();
    CHECK(f.sched.active_deliveries() == 0);
    auto l1 = f.link();
    f.pump();
    REQUIRE(f.sent[0].size() == 1);
    const auto da = f.sent[0][0].da_id;
    f.sched.remove_link(l1);
    CHECK(ta.rcpt(0).state() == RcptState::active);
    CHECK(f.sched.active_deliveries() == 0);
    // A RESULT for the lost delivery no longer matches.
    CHECK_FALSE(f.sched.complete(l1, da, false, {}));
    auto l2 = f.link();
    f.pump();
    REQUIRE(f.sent[1].size() == 1);
    CHECK(f.sent[1][0].ta_id == ta.id);
    CHECK_FALSE(f.sched.complete(l1, f.sent[1][0].da_id, false, {}));  // wrong link
    CHECK(f.sched.complete(l2, f.sent[1][0].da_id, false, {}));
    CHECK(f.sched.destinations() == 0);  // idle queues are forgotten
}

TEST_CASE("destinations are served round robin") {
    auto o = Fixture::opts();
    o.link_max_inflight = 2;
    Fixture f(o);
    f.link();
    std::vector<std::string> other{"[127.0.0.2]:25"};
    f.submit({"a@example.net"});
    f.submit({"b@example.net"});
    Ta* ta = f.q.admit(envelope({"c@example.com"}));
    f.sched.submit(*ta, Destination{"[127.0.0.2]:25", &other}, {0});
    f.pump();
    REQUIRE(f.sent[0].size() == 2);
    CHECK(f.sent[0][0].nexthops != f.sent[0][1].nexthops);
}

TEST_CASE("a delivery refused at connection level is tried once more, then left to the RESULT") {
    auto o = Fixture::opts();
    o.initial_concurrency = 4;
    Fixture f(o);
    auto l = f.link();
    Ta& ta = f.submit({"a@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 1);
    SECTION("refused twice") {
        const smx::msg::Reply busy{421, "4.7.0", "too many connections"};
        REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, true, busy));
        // Back in its queue (active, so the RESULT's handler skips it), not deferred.
        CHECK(ta.rcpt(0).state() == RcptState::active);
        CHECK(f.sched.window(f.dest.key) == 3);
        f.pump();
        REQUIRE(f.sent[0].size() == 2);
        CHECK(f.sent[0][1].ta_id == ta.id);
        // Refused again: 1/4 + 1/3 of a cohort, still live, but no third try.
        REQUIRE(f.sched.complete(l, f.sent[0][1].da_id, true, busy));
        CHECK_FALSE(f.sched.dead(f.dest.key));
        CHECK(ta.rcpt(0).state() == RcptState::inflight);
        f.pump();
        CHECK(f.sent[0].size() == 2);
        CHECK(f.suspended.empty());
    }
    SECTION("a reclaimed delivery (retry false) is never put back") {
        REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, true, {0, "4.4.1", "reclaimed"}, false));
        CHECK_FALSE(f.sched.dead(f.dest.key));
        CHECK(ta.rcpt(0).state() == RcptState::inflight);  // left to the RESULT: deferred
        f.pump();
        CHECK(f.sent[0].size() == 1);
    }
}

TEST_CASE("a held recipient refused at connection level is not put back") {
    auto o = Fixture::opts();
    o.initial_concurrency = 4;
    Fixture f(o);
    auto l = f.link();
    Ta& ta = f.submit({"a@example.net", "b@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 1);
    f.q.set_hold(ta, 1, true);
    REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, true, {421, "", "busy"}));
    CHECK(ta.rcpt(0).state() == RcptState::active);
    CHECK(ta.rcpt(1).state() == RcptState::inflight);  // the RESULT parks it held
    f.pump();
    REQUIRE(f.sent[0].size() == 2);
    REQUIRE(f.sent[0][1].rcpts.size() == 1);
    CHECK(f.sent[0][1].rcpts[0].idx == 0);
}

namespace {
// Runs the io_context for real time: the pace timer waits for the distance
// on the fake clock, so the test moves the clock first, then waits that long.
void run_for(Fixture& f, std::chrono::milliseconds d) {
    f.io.run_for(d);
    f.io.restart();
}
} // namespace

TEST_CASE("the rate limit spaces a destination's DELIVERs interval / limit apart") {
    auto o = Fixture::opts();
    o.initial_concurrency = 5;  // room for all of them: only the rate holds them back
    o.rate_limit = 20;
    o.rate_interval = std::chrono::seconds(1);  // one per 50 ms
    Fixture f(o);
    f.link();
    std::vector<std::string> other{"[127.0.0.2]:25"};
    for (int i = 0; i < 5; ++i) f.submit({"a@example.net"});
    Ta* ta = f.q.admit(envelope({"c@example.com"}));
    f.sched.submit(*ta, Destination{"[127.0.0.2]:25", &other}, {0});
    f.pump();
    // One each: the limit is per destination, and the window has room.
    REQUIRE(f.sent[0].size() == 2);
    f.clock.advance(std::chrono::milliseconds(49));
    run_for(f, std::chrono::milliseconds(120));
    CHECK(f.sent[0].size() == 2);  // not before its slot
    f.clock.advance(std::chrono::milliseconds(1));
    run_for(f, std::chrono::milliseconds(120));
    CHECK(f.sent[0].size() == 3);
    // A late wake-up does not lower the rate: the next slot counts from the
    // last one, not from when it was taken.
    f.clock.advance(std::chrono::milliseconds(70));
    run_for(f, std::chrono::milliseconds(120));
    CHECK(f.sent[0].size() == 4);
    f.clock.advance(std::chrono::milliseconds(30));
    run_for(f, std::chrono::milliseconds(120));
    CHECK(f.sent[0].size() == 5);
    // No limit any more (reload): the rest goes at once.
    f.sched.set_rate(0, std::chrono::seconds(1));
    f.pump();
    CHECK(f.sent[0].size() == 6);
}

TEST_CASE("a rate-limited destination is remembered until its next slot") {
    auto o = Fixture::opts();
    o.rate_limit = 10;
    o.rate_interval = std::chrono::seconds(1);  // one per 100 ms
    Fixture f(o);
    auto l = f.link();
    f.submit({"a@example.net"});
    f.pump();
    REQUIRE(f.sent[0].size() == 1);
    REQUIRE(f.sched.complete(l, f.sent[0][0].da_id, false, {}));
    CHECK(f.sched.destinations() == 1);  // idle, but its slot is still ahead
    f.submit({"b@example.net"});
    f.pump();
    CHECK(f.sent[0].size() == 1);  // new mail does not jump the spacing
    f.clock.advance(std::chrono::milliseconds(100));
    run_for(f, std::chrono::milliseconds(200));
    REQUIRE(f.sent[0].size() == 2);
    REQUIRE(f.sched.complete(l, f.sent[0][1].da_id, false, {}));
    f.clock.advance(std::chrono::milliseconds(100));
    run_for(f, std::chrono::milliseconds(200));
    CHECK(f.sched.destinations() == 0);  // forgotten once its slot passed
}
