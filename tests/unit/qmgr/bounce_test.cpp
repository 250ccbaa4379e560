// The bouncer on its own (bounce.hpp) with a real IBDB (fsync off), an
// ActiveQueue, a Reaper, real content files and the FakeClock; its hooks are
// the test's: one DSN per transaction and turn, RET=FULL only for relay
// clients and within max_returned_message, delay warnings once, no DSN to
// the null sender, and a content file that is not what its envelope says
// gives a DSN without the original.
#include "qmgr/bounce.hpp"

#include "tests/unit/qmgr/fake_clock.hpp"
#include "tests/unit/qmgr/spool.hpp"

#include <sys/stat.h>

#include <map>

using namespace parts_test;

namespace {

struct Bounces {
    Spool s;
    FakeClock clock;
    asio::thread_pool pool{2};
    std::unique_ptr<Ibdb> ibdb = s.ibdb(pool);
    ActiveQueue queue;
    Reaper reaper{s.cfg, s.io.get_executor(), pool, *ibdb};
    // What the hooks heard: recipients final (by transaction, in calls),
    // DSNs that could not be queued, and the DSNs queued (their content by
    // the address they go to).
    std::vector<std::pair<std::string, std::vector<std::uint32_t>>> bounced, failed;
    std::vector<std::string> errors;
    std::map<std::string, std::vector<std::string>> dsns;
    std::size_t scheduled = 0;
    std::unique_ptr<Bouncer> b;

    // Made after the test has set s.cfg.
    void start() {
        auto idx = [](const std::vector<Bouncer::Bounce>& list) {
            std::vector<std::uint32_t> out;
            for (const auto& x : list) out.push_back(x.idx);
            return out;
        };
        Bouncer::Hooks hooks{
            [this, idx](const std::string& id, const std::vector<Bouncer::Bounce>& list) {
                if (Ta* ta = queue.find(id))
                    for (const auto& x : list) queue.bounced(*ta, x.idx);
                bounced.emplace_back(id, idx(list));
            },
            [this, idx](const std::string& id, const std::vector<Bouncer::Bounce>& list,
                        const std::string& error) {
                if (Ta* ta = queue.find(id))
                    for (const auto& x : list) queue.bounce_failed(*ta, x.idx, {0, "4.3.0", error});
                failed.emplace_back(id, idx(list));
                errors.push_back(error);
            },
            [this](Ta& dsn) {
                ++scheduled;
                CHECK(dsn.sender().empty());
                REQUIRE(dsn.rcpts().size() == 1);
                dsns[dsn.rcpt(0).addr()].push_back(Spool::read(s.path(dsn.content_id())));
            }};
        b = std::make_unique<Bouncer>(s.cfg, s.io.get_executor(), pool, queue, *ibdb, reaper,
                                      std::move(hooks), clock);
    }
    ~Bounces() {
        if (b) s.run_until([&] { return b->idle(); });
        ibdb->flush_sync();
        pool.join();
    }

    // Arrived now, by the test's clock.
    Ta& admit(smx::msg::TaCommit e) {
        e.arrival_us = clock.now_us();
        Ta* ta = queue.admit(e);
        REQUIRE(ta);
        return *ta;
    }
    void fail(Ta& ta, std::uint32_t idx) {
        b->bounce(ta, idx, Attempt{"mx.example.net[192.0.2.1]:25"},
                  dsn::failed_rcpt(ta.rcpt(idx).addr(), {550, "5.1.1", "no such user"},
                                   "mx.example.net[192.0.2.1]:25"));
    }
    // Every coroutine the bouncer started has ended.
    void done() { REQUIRE(s.run_until([&] { return b->idle(); })); }
    std::size_t count(const std::string& text, const std::string& what) const {
        std::size_t n = 0;
        for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
        return n;
    }
};

smx::msg::TaCommit from(Spool& s, const std::string& sender, std::vector<std::string> rcpts,
                       const std::string& bytes = "Subject: original\r\n\r\nthe body\r\n") {
    auto e = message(s, std::move(rcpts), bytes);
    e.sender = sender;
    return e;
}

} // namespace

TEST_CASE("bouncer: one DSN per transaction for what failed in one turn", "[bounce]") {
    Bounces t;
    t.start();
    Ta& a = t.admit(from(t.s, "a@example.org", {"a1@example.net", "a2@example.net", "a3@example.net"}));
    Ta& b = t.admit(from(t.s, "b@example.org", {"b1@example.net"}));
    t.fail(a, 0);
    t.fail(a, 1);
    t.fail(b, 0);
    t.done();
    CHECK(t.b->dsn_sent() == 2);
    CHECK(t.b->bounced() == 3);
    CHECK(t.failed.empty());
    // Each transaction's recipients at once, when its DSN is durable.
    std::map<std::string, std::vector<std::uint32_t>> final(t.bounced.begin(), t.bounced.end());
    CHECK(t.bounced.size() == 2);
    CHECK(final[a.id] == std::vector<std::uint32_t>{0, 1});
    CHECK(final[b.id] == std::vector<std::uint32_t>{0});
    REQUIRE(t.dsns["a@example.org"].size() == 1);
    const std::string& dsn = t.dsns["a@example.org"][0];
    CHECK(dsn.find("Final-Recipient: rfc822; a1@example.net") != std::string::npos);
    CHECK(dsn.find("Final-Recipient: rfc822; a2@example.net") != std::string::npos);
    CHECK(dsn.find("a3@example.net") == std::string::npos);
    CHECK(dsn.find("Subject: Undelivered Mail Returned to Sender") != std::string::npos);
    CHECK(dsn.find("Subject: original") != std::string::npos);  // its headers
    CHECK(a.rcpt(0).state() == RcptState::bounced);
    CHECK(a.rcpt(2).state() == RcptState::active);
    // Durable in IBDB before they count as queued.
    CHECK(t.ibdb->stats().transactions == 2);
    // A later turn: a DSN of its own.
    t.fail(a, 2);
    t.done();
    CHECK(t.b->dsn_sent() == 3);
    REQUIRE(t.dsns["a@example.org"].size() == 2);
    CHECK(t.dsns["a@example.org"][1].find("Final-Recipient: rfc822; a3@example.net") != std::string::npos);
    CHECK(t.scheduled == 3);
}

TEST_CASE("bouncer: RET=FULL returns the message only to a relay client, and only up to the cap",
          "[bounce]") {
    Bounces t;
    t.start();
    const std::string head = "Subject: original\r\n\r\n";
    auto msg = [&](std::size_t size) { return head + std::string(size - head.size(), 'b'); };
    auto full = [&](const std::string& sender, const std::string& client, std::size_t size) {
        auto e = from(t.s, sender, {"r@example.net"}, msg(size));
        e.params = "RET=FULL";
        e.client_addr = client;
        return e;
    };
    Ta& relay = t.admit(full("relay@example.org", "127.0.0.1", 100));
    Ta& outside = t.admit(full("outside@example.org", "192.0.2.7", 100));
    Ta& at_cap = t.admit(full("cap@example.org", "127.0.0.1", dsn::max_returned_message));
    Ta& over = t.admit(full("over@example.org", "127.0.0.1", dsn::max_returned_message + 1));
    Ta& hdrs = t.admit(from(t.s, "hdrs@example.org", {"r@example.net"}));
    for (Ta* ta : {&relay, &outside, &at_cap, &over, &hdrs}) t.fail(*ta, 0);
    t.done();
    REQUIRE(t.b->dsn_sent() == 5);
    auto returned = [&](const std::string& sender) {
        REQUIRE(t.dsns[sender].size() == 1);
        const std::string& d = t.dsns[sender][0];
        const bool whole = d.find("Content-Type: message/rfc822") != std::string::npos;
        CHECK(whole != (d.find("Content-Type: text/rfc822-headers") != std::string::npos));
        CHECK(d.find("Subject: original") != std::string::npos);  // headers always
        CHECK(whole == (d.find("bbbbbbbb") != std::string::npos));
        return whole;
    };
    CHECK(returned("relay@example.org"));
    CHECK_FALSE(returned("outside@example.org"));  // anyone may forge its sender
    CHECK(returned("cap@example.org"));
    CHECK_FALSE(returned("over@example.org"));
    CHECK_FALSE(returned("hdrs@example.org"));  // no RET
}

TEST_CASE("bouncer: a delay warning once delay_warning_time has passed, and only once",
          "[bounce]") {
    Bounces t;
    t.s.cfg.queue.delay_warning_time = 4h;
    t.start();
    auto e = from(t.s, "a@example.org", {"a1@example.net", "a2@example.net", "a3@example.net"});
    e.params = "RET=FULL";  // never the whole message in a warning
    e.rcpts[2].params = "NOTIFY=FAILURE";  // no DELAY asked for
    Ta& a = t.admit(e);
    Ta& n = t.admit(from(t.s, "", {"n@example.net"}));
    auto late = [&](Ta& ta, std::uint32_t idx) {
        if (ta.rcpt(idx).state() != RcptState::moving)
            t.queue.defer_begin(ta, idx, {451, "4.3.0", "try later"}, "mx.example.net[192.0.2.1]:25");
        t.b->warn_if_late(ta, idx, "mx.example.net[192.0.2.1]:25");
    };
    late(a, 0);  // too early
    t.done();
    CHECK(t.b->dsn_sent() == 0);
    CHECK_FALSE(a.rcpt(0).warned());
    t.clock.advance(5h);
    late(a, 0);
    late(a, 1);
    late(a, 2);
    late(n, 0);
    t.done();
    CHECK(t.b->dsn_sent() == 1);
    CHECK(t.bounced.empty());  // a warning closes nothing
    REQUIRE(t.dsns["a@example.org"].size() == 1);
    const std::string& w = t.dsns["a@example.org"][0];
    CHECK(t.count(w, "Action: delayed") == 2);
    CHECK(w.find("a3@example.net") == std::string::npos);
    CHECK(w.find("Subject: Delayed Mail") != std::string::npos);
    CHECK(w.find("Content-Type: text/rfc822-headers") != std::string::npos);
    CHECK(a.rcpt(0).warned());
    CHECK(a.rcpt(1).warned());
    CHECK_FALSE(a.rcpt(2).warned());
    CHECK_FALSE(n.rcpt(0).warned());
    late(a, 0);  // warned once is enough
    t.done();
    CHECK(t.b->dsn_sent() == 1);
    CHECK(t.dsns.size() == 1);
}

TEST_CASE("bouncer: a clock stepped back since the message arrived makes no warning early",
          "[bounce]") {
    Bounces t;
    t.s.cfg.queue.delay_warning_time = 4h;
    t.start();
    auto e = from(t.s, "a@example.org", {"a@example.net"});
    e.arrival_us = t.clock.now_us() + 60'000'000;  // stamped a minute "ahead"
    Ta* a = t.queue.admit(e);
    REQUIRE(a);
    t.queue.defer_begin(*a, 0, {451, "4.3.0", "try later"}, "");
    t.b->warn_if_late(*a, 0, "");
    t.done();
    CHECK(t.b->dsn_sent() == 0);
    CHECK_FALSE(a->rcpt(0).warned());
}

TEST_CASE("bouncer: no DSN to the null sender, nor outside relay_networks with bounce_untrusted off",
          "[bounce]") {
    Bounces t;
    t.s.cfg.queue.bounce_untrusted = false;
    t.start();
    Ta& null_sender = t.admit(from(t.s, "", {"n@example.net"}));
    auto outside = from(t.s, "o@example.org", {"o@example.net"});
    outside.client_addr = "192.0.2.7";
    Ta& o = t.admit(outside);
    auto quiet = from(t.s, "q@example.org", {"never@example.net", "loud@example.net"});
    quiet.rcpts[0].params = "NOTIFY=NEVER";
    Ta& q = t.admit(quiet);
    t.fail(null_sender, 0);
    t.fail(o, 0);
    t.fail(q, 0);
    t.fail(q, 1);
    t.done();
    // Final at once, without a DSN; NOTIFY=NEVER too, beside one that has one.
    CHECK(t.b->dsn_sent() == 1);
    CHECK(t.b->bounced() == 4);
    CHECK(t.dsns.count("") == 0);
    CHECK(t.dsns.count("o@example.org") == 0);
    REQUIRE(t.dsns["q@example.org"].size() == 1);
    CHECK(t.dsns["q@example.org"][0].find("never@example.net") == std::string::npos);
    CHECK(null_sender.rcpt(0).state() == RcptState::bounced);
    CHECK(o.rcpt(0).state() == RcptState::bounced);
    CHECK(q.rcpt(0).state() == RcptState::bounced);
    CHECK(q.rcpt(1).state() == RcptState::bounced);
    CHECK(t.bounced.size() == 4);  // q: the quiet one at once, the other with its DSN
}

TEST_CASE("bouncer: content that is not what the envelope says: a DSN without the original",
          "[bounce]") {
    Bounces t;
    t.start();
    // Another size than the envelope's; a FIFO (never blocked on); a link to
    // another message's file (never followed).
    auto sized = from(t.s, "size@example.org", {"r@example.net"});
    sized.size += 1;
    auto fifo = from(t.s, "fifo@example.org", {"r@example.net"});
    fs::remove(t.s.path(fifo.ta_id));
    REQUIRE(::mkfifo(t.s.path(fifo.ta_id).c_str(), 0640) == 0);
    const auto other = from(t.s, "x@example.org", {"x@example.net"},
                            "Subject: someone else's\r\n\r\nsecret\r\n");
    auto link = from(t.s, "link@example.org", {"r@example.net"});
    fs::remove(t.s.path(link.ta_id));
    fs::create_symlink(t.s.path(other.ta_id), t.s.path(link.ta_id));
    link.size = other.size;
    for (const auto& e : {sized, fifo, link}) t.fail(t.admit(e), 0);
    t.done();
    CHECK(t.b->dsn_sent() == 3);
    CHECK(t.bounced.size() == 3);
    for (const char* sender : {"size@example.org", "fifo@example.org", "link@example.org"}) {
        INFO(sender);
        REQUIRE(t.dsns[sender].size() == 1);
        const std::string& d = t.dsns[sender][0];
        CHECK(d.find("Final-Recipient: rfc822; r@example.net") != std::string::npos);
        CHECK(d.find("Subject: original") == std::string::npos);
        CHECK(d.find("someone else's") == std::string::npos);
    }
}

TEST_CASE("bouncer: a DSN that cannot be written leaves its recipients to be tried again",
          "[bounce]") {
    Bounces t;
    t.start();
    Ta& a = t.admit(from(t.s, "a@example.org", {"a1@example.net", "a2@example.net"}));
    // The content directory is a file now: no DSN can be made in it.
    const std::string content = t.s.cfg.content_dir_abs();
    fs::remove_all(content);
    std::ofstream(content) << "in the way";
    t.fail(a, 0);
    t.fail(a, 1);
    t.done();
    CHECK(t.b->dsn_sent() == 0);
    CHECK(t.bounced.empty());
    REQUIRE(t.failed.size() == 1);
    CHECK(t.failed[0] == std::make_pair(a.id, std::vector<std::uint32_t>{0, 1}));
    CHECK(t.errors[0] == "non-delivery notification not written: Not a directory");
    CHECK(a.rcpt(0).state() == RcptState::moving);  // to DEFEDB, as its owner does
    CHECK(t.ibdb->stats().transactions == 0);
    CHECK(t.queue.transactions() == 1);  // no DSN transaction left behind
}

TEST_CASE("bouncer: NOTIFY=SUCCESS relayed to a next hop without DSN gets a notice", "[bounce]") {
    Bounces t;
    t.start();
    auto e = from(t.s, "a@example.org", {"ok@example.net", "dsn@example.net", "plain@example.net"});
    e.rcpts[0].params = "NOTIFY=SUCCESS,FAILURE";
    e.rcpts[1].params = "NOTIFY=SUCCESS";
    Ta& a = t.admit(e);
    const smx::msg::Reply ok{250, "2.0.0", "queued"};
    t.b->relayed(a, 0, "mx.example.net[192.0.2.1]:25", ok, false);
    t.b->relayed(a, 1, "mx.example.net[192.0.2.1]:25", ok, true);   // the next hop reports
    t.b->relayed(a, 2, "mx.example.net[192.0.2.1]:25", ok, false);  // no NOTIFY=SUCCESS
    t.done();
    CHECK(t.b->dsn_sent() == 1);
    REQUIRE(t.dsns["a@example.org"].size() == 1);
    const std::string& d = t.dsns["a@example.org"][0];
    CHECK(d.find("Action: relayed") != std::string::npos);
    CHECK(d.find("ok@example.net") != std::string::npos);
    CHECK(d.find("dsn@example.net") == std::string::npos);
    CHECK(t.bounced.empty());
}
