// The deferred queue on its own (deferred.hpp) over a real DEFEDB, an
// ActiveQueue and the FakeClock; its hooks are the test's, and they do to
// the active queue what Qmgr does: parks written in one DEFEDB commit per
// batch, the copy a segment message gets first, the due loop with its
// leases, `smx delete` while recipients are due, a failed batch tried again,
// and stop() with a batch out.
#include "qmgr/deferred.hpp"

#include "tests/unit/qmgr/envelope.hpp"
#include "tests/unit/qmgr/fake_clock.hpp"
#include "tests/unit/qmgr/spool.hpp"

#include "libsm/content_file.hpp"

#include <sys/stat.h>

#include <cstdlib>

using namespace parts_test;

namespace {

using Parks = std::vector<DeferredQueue::Park>;
using Checks = std::vector<DeferredQueue::Check>;

struct Deferrals {
    Spool s;
    FakeClock clock;
    asio::thread_pool pool{2};
    DefedbStrand strand{pool, s.defedb};
    ActiveQueue queue;
    std::vector<Parks> written;  // one entry per batch
    std::vector<Checks> gone;
    std::vector<std::vector<DeferredTa>> due;  // one entry per due() answer
    std::size_t room = 100, room_asked = 0;
    std::unique_ptr<DeferredQueue> dq;

    // Made after the test has set s.cfg (and the content writers).
    void start() {
        DeferredQueue::Hooks hooks{
            [this](Parks parks, Checks g) {
                for (const auto& p : parks)
                    if (Ta* ta = queue.find(p.rec.ta_id)) queue.deferred(*ta, p.rec.idx);
                written.push_back(std::move(parks));
                gone.push_back(std::move(g));
            },
            [this](std::vector<DeferredTa> tas) { due.push_back(std::move(tas)); },
            [this] {
                ++room_asked;
                return room;
            }};
        dq = std::make_unique<DeferredQueue>(s.cfg, s.io.get_executor(), strand, std::move(hooks),
                                             clock, 10ms);
        dq->start();
    }
    // As QMGR restarted: a new queue over the same DEFEDB arms its due timer
    // against the clock afresh (one armed before the FakeClock moved still
    // waits its real time).
    void restart() {
        dq->stop();
        REQUIRE(s.run_until([&] { return dq->idle(); }));
        dq.reset();
        start();
    }
    ~Deferrals() {
        if (dq) {
            dq->stop();
            s.run_until([&] { return dq->idle(); });
        }
        pool.join();
    }

    Ta& admit(const smx::msg::TaCommit& e) {
        Ta* ta = queue.admit(e);
        REQUIRE(ta);
        return *ta;
    }
    // A recipient failed for now, as Qmgr::defer does it.
    void defer(Ta& ta, std::uint32_t idx, std::chrono::microseconds until) {
        queue.defer_begin(ta, idx, {451, "4.3.0", "try later"}, "mx.example.net[192.0.2.1]:25");
        dq->park(ta, idx, clock.now_us() + static_cast<std::uint64_t>(until.count()));
    }
    // Recipients given by every due() answer so far, as "ta_id/idx".
    std::vector<std::string> given() const {
        std::vector<std::string> out;
        for (const auto& answer : due)
            for (const auto& t : answer)
                for (const auto& r : t.rcpts) out.push_back(r.ta_id + "/" + std::to_string(r.idx));
        return out;
    }
    // `smx flush`: due now, and the answer.
    void flush() {
        const std::size_t before = due.size();
        dq->due_now();
        REQUIRE(s.run_until([&] { return due.size() > before; }));
    }
};

std::vector<std::string> names(const Parks& parks) {
    std::vector<std::string> out;
    for (const auto& p : parks) out.push_back(p.rec.ta_id + "/" + std::to_string(p.rec.idx));
    return out;
}

// A message kept as a record in a new content segment, no file of its own.
smx::msg::TaCommit in_segment(Spool& s, std::vector<std::string> rcpts,
                             const std::string& data = "Subject: seg\r\n\r\nsegment body\r\n") {
    auto e = envelope(std::move(rcpts));
    e.content_id = s.record(smx::new_ta_id(), e.ta_id, data);
    e.size = data.size();
    return e;
}

// The copy of e's message cannot be made (its directory cannot be: a file
// has its name) until the file returned goes.
fs::path block_copy(Spool& s, const smx::msg::TaCommit& e) {
    const fs::path blocker = fs::path(s.path(e.ta_id)).parent_path();
    std::ofstream(blocker) << "in the way";
    return blocker;
}

// SMX_CONTENT_WRITERS as the MCP sets it, for the components made while it
// lives.
struct Writers {
    explicit Writers(smx::content::Writers w) {
        ::setenv(smx::content::writers_env, smx::content::writers_env_value(w).c_str(), 1);
    }
    ~Writers() { ::unsetenv(smx::content::writers_env); }
};

} // namespace

TEST_CASE("deferred: the parks of one turn are one batch; those made while it is out, the next",
          "[deferred]") {
    Deferrals d;
    d.start();
    Ta& a = d.admit(message(d.s, {"a1@example.net", "a2@example.net"}));
    Ta& b = d.admit(message(d.s, {"b@example.net"}));
    Ta& c = d.admit(message(d.s, {"c@example.net"}));
    Gate g;
    d.s.hold(d.strand, g);
    d.defer(a, 0, 1h);
    d.defer(a, 1, 1h);
    d.defer(b, 0, 1h);
    // `smx delete` of b before its batch: its park is not written.
    CHECK(d.dq->cancel_parks(b.id) == std::vector<std::uint32_t>{0});
    d.s.settle();  // the batch is out, waiting behind the gate
    d.defer(c, 0, 1h);
    const std::string unknown = smx::new_ta_id();
    d.dq->check(unknown, unknown);  // DEFEDB never held it
    d.dq->check(a.id, a.content_id());  // it holds a
    g.open();
    REQUIRE(d.s.run_until([&] { return d.written.size() == 2; }));
    CHECK(names(d.written[0]) == std::vector<std::string>{a.id + "/0", a.id + "/1"});
    CHECK(d.written[0][0].fresh);
    CHECK(d.gone[0].empty());
    CHECK(names(d.written[1]) == std::vector<std::string>{c.id + "/0"});
    REQUIRE(d.gone[1].size() == 1);
    CHECK(d.gone[1][0].ta_id == unknown);
    CHECK(d.dq->count() == 3);
    CHECK(d.s.defedb.count() == 3);
    const auto stored = d.s.defedb.get(a.id);
    REQUIRE(stored);
    CHECK(stored->rcpts.size() == 2);
    CHECK(stored->rcpts[1].last_reply.text == "try later");
    CHECK_FALSE(d.s.defedb.has_ta(b.id));
    CHECK(a.rcpt(0).state() == RcptState::deferred);
    CHECK(d.given().empty());  // due in an hour
}

TEST_CASE("deferred: a segment message is copied to a file of its own before DEFEDB names it",
          "[deferred]") {
    Deferrals d;
    d.start();
    const auto e = in_segment(d.s, {"a@example.net", "b@example.net"});
    Ta& ta = d.admit(e);
    d.defer(ta, 0, 1h);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 1; }));
    const std::string copy = d.s.path(e.ta_id);
    CHECK(Spool::read(copy) == "Subject: seg\r\n\r\nsegment body\r\n");
    const auto w = smx::content::writers_from_env();
    CHECK(has_defedb_copy({d.s.cfg.content_dir_abs(), true, w}, e));
    const auto stored = d.s.defedb.get(e.ta_id);
    REQUIRE(stored);
    CHECK(stored->envelope.content_id == e.ta_id);  // the copy, never the segment
    CHECK(ta.content_id() == e.content_id);             // memory still reads the segment
    // The next deferral of the message uses that copy: the segment may be
    // gone by then.
    fs::remove(smx::content::segment_path(d.s.cfg.content_dir_abs(),
                                         smx::content::parse_segment_ref(e.content_id)->segment));
    d.defer(ta, 1, 2h);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 2; }));
    const auto both = d.s.defedb.get(e.ta_id);
    REQUIRE(both);
    REQUIRE(both->rcpts.size() == 2);
    CHECK(both->rcpts[1].next_try_us > d.clock.now_us() + 3'600'000'000);  // not made due
    CHECK(d.dq->quarantined() == 0);
}

TEST_CASE("deferred: a file SMTPS's account put under the copy's name is replaced, not used",
          "[deferred]") {
    // QMGR's account is another here, so that this process's files are
    // SMTPS's: the file planted under the copy's name and the segment alike.
    const uid_t me = ::geteuid();
    Writers as_mcp({me, me + 1});
    Deferrals d;
    d.start();
    const std::string data = "Subject: seg\r\n\r\nthe real one\r\n";
    const auto e = in_segment(d.s, {"a@example.net"}, data);
    const std::string copy = d.s.file(e.ta_id, std::string(data.size(), 'X'));  // its size, too
    CHECK_FALSE(has_defedb_copy(smx::content::store_for(d.s.cfg), e));
    Ta& ta = d.admit(e);
    d.defer(ta, 0, 1h);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 1; }));
    CHECK(Spool::read(copy) == data);
    CHECK(d.s.defedb.get(e.ta_id)->envelope.content_id == e.ta_id);
}

TEST_CASE("deferred: a segment record that cannot be copied is due at once and quarantined",
          "[deferred]") {
    Deferrals d;
    d.start();
    auto e = envelope({"a@example.net", "b@example.net"});
    // The record of another transaction: not this message.
    const std::string data = "Subject: x\r\n\r\nx\r\n";
    e.content_id = d.s.record(smx::new_ta_id(), smx::new_ta_id(), data);
    e.size = data.size();
    Ta& ta = d.admit(e);
    d.defer(ta, 0, 1h);
    d.defer(ta, 1, 1h);
    REQUIRE(d.s.run_until([&] { return d.dq->quarantined() == 1; }));
    CHECK(d.written.size() == 1);  // durable in DEFEDB first, as every park
    CHECK_FALSE(fs::exists(d.s.path(e.ta_id)));
    const std::string saved = d.s.cfg.quarantine_dir_abs() + "/" + e.ta_id + ".envelope";
    REQUIRE(fs::exists(saved));
    const auto frame = Spool::read(saved);
    CHECK(frame.find("a@example.net") != std::string::npos);
    CHECK_FALSE(d.s.defedb.has_ta(e.ta_id));
    CHECK(d.given().empty());  // never handed out
}

TEST_CASE("deferred: a due recipient is leased: not given twice while out, back after the lease",
          "[deferred]") {
    Deferrals d;
    d.s.cfg.queue.retry_min = 60s;  // the lease
    d.start();
    Ta& ta = d.admit(message(d.s, {"a@example.net"}));
    const std::string one = ta.id + "/0";
    d.defer(ta, 0, 0us);  // due at once
    REQUIRE(d.s.run_until([&] { return d.given().size() == 1; }));
    CHECK(d.written.size() == 1);
    CHECK(d.given() == std::vector<std::string>{one});
    CHECK(d.due.back()[0].envelope.ta_id == ta.id);
    // Asked again at once: it is out, so nothing.
    d.flush();
    CHECK(d.given().size() == 1);
    // The lease ends, the delivery never came back (QMGR died): due again.
    d.clock.advance(59s);
    d.restart();
    d.flush();
    CHECK(d.given().size() == 1);
    d.clock.advance(2s);
    d.restart();
    REQUIRE(d.s.run_until([&] { return d.given().size() == 2; }));
    CHECK(d.given().back() == one);

    // Deferred again once back in memory: DEFEDB's record is updated.
    const DeferredRcpt rec = d.due.back()[0].rcpts[0];
    d.queue.due(ta, 0, rec);
    d.queue.count_attempt(ta, 0);
    d.defer(ta, 0, 30min);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 2; }));
    CHECK_FALSE(d.written[1][0].fresh);
    const auto stored = d.s.defedb.get(ta.id);
    REQUIRE(stored);
    CHECK(stored->rcpts[0].attempts == rec.attempts + 1);
    CHECK(stored->rcpts[0].next_try_us == d.clock.now_us() + 1'800'000'000);
    CHECK(d.dq->count() == 1);
}

TEST_CASE("deferred: with no room in the active queue nothing is taken or leased", "[deferred]") {
    Deferrals d;
    d.room = 0;
    d.start();
    Ta& ta = d.admit(message(d.s, {"a@example.net"}));
    d.defer(ta, 0, 0us);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 1 && d.room_asked > 0; }));
    const std::uint64_t next_try = d.s.defedb.get(ta.id)->rcpts[0].next_try_us;
    d.s.settle();
    CHECK(d.due.empty());
    CHECK(d.s.defedb.get(ta.id)->rcpts[0].next_try_us == next_try);  // no lease
    d.room = 1;
    d.dq->due_now();
    REQUIRE(d.s.run_until([&] { return d.given().size() == 1; }));
}

TEST_CASE("deferred: `smx delete` while its recipients are being taken: the due answer leaves it out",
          "[deferred]") {
    Deferrals d;
    d.start();
    d.room = 0;  // due, but not taken yet
    Ta& a = d.admit(message(d.s, {"a1@example.net", "a2@example.net"}));
    Ta& b = d.admit(message(d.s, {"b@example.net"}));
    d.defer(a, 0, 0us);
    d.defer(a, 1, 0us);
    d.defer(b, 0, 0us);
    REQUIRE(d.s.run_until([&] { return d.written.size() == 1 && d.room_asked > 0; }));
    // The due read goes out behind the gate, the removal behind it.
    Gate g;
    d.s.hold(d.strand, g);
    d.room = 100;
    const std::size_t asked = d.room_asked;
    d.dq->due_now();
    // Asked for room: its DEFEDB read is on the strand now.
    REQUIRE(d.s.run_until([&] { return d.room_asked > asked; }));
    std::optional<std::optional<std::size_t>> removed;
    auto remove = [&](std::string id) -> asio::awaitable<void> {
        removed = co_await d.dq->remove_ta(std::move(id));
    };
    asio::co_spawn(d.s.io, remove(a.id), smx::crash_on_exception("remove_ta"));
    d.s.settle();
    g.open();
    REQUIRE(d.s.run_until([&] { return removed.has_value() && !d.due.empty(); }));
    CHECK(**removed == 2);
    CHECK(d.given() == std::vector<std::string>{b.id + "/0"});  // DEFEDB had leased a's too
    CHECK_FALSE(d.s.defedb.has_ta(a.id));
    CHECK(d.dq->count() == 1);
}

TEST_CASE("deferred: a batch that fails is tried again, with what came meanwhile", "[deferred]") {
    Deferrals d;
    d.start();
    const auto e = in_segment(d.s, {"a@example.net"});
    // The message that comes meanwhile, made now: its content must not be in
    // the directory the blocker takes the place of (1 in 256 ids would be).
    auto meanwhile = message(d.s, {"b@example.net"});
    const fs::path copy_dir = fs::path(d.s.path(e.ta_id)).parent_path();
    while (fs::path(d.s.path(meanwhile.ta_id)).parent_path() == copy_dir) {
        fs::remove_all(copy_dir);
        meanwhile = message(d.s, {"b@example.net"});
    }
    const fs::path blocker = block_copy(d.s, e);
    Ta& ta = d.admit(e);
    d.defer(ta, 0, 1h);
    d.s.settle();  // the batch is out
    // A call behind it on the strand: once it is back, the batch has failed.
    std::optional<bool> behind;
    auto after = [&]() -> asio::awaitable<void> {
        auto mark = [](Defedb&) { return true; };
        behind = (co_await d.strand.run(std::move(mark))).has_value();
    };
    asio::co_spawn(d.s.io, after(), smx::crash_on_exception("strand mark"));
    REQUIRE(d.s.run_until([&] { return behind.has_value(); }));
    CHECK(d.written.empty());
    CHECK_FALSE(d.s.defedb.has_ta(e.ta_id));
    Ta& other = d.admit(meanwhile);
    d.defer(other, 0, 1h);
    fs::remove(blocker);
    REQUIRE(d.s.run_until([&] { return !d.written.empty(); }));
    CHECK(names(d.written[0]) == std::vector<std::string>{ta.id + "/0", other.id + "/0"});
    CHECK(d.s.defedb.has_ta(e.ta_id));
    CHECK(fs::exists(d.s.path(e.ta_id)));
}

TEST_CASE("deferred: stop() with a batch out: it is answered, a failed one not tried again, "
          "and every coroutine ends",
          "[deferred]") {
    const bool fails = GENERATE(false, true);
    Deferrals d;
    d.start();
    const auto e = in_segment(d.s, {"a@example.net"});
    if (fails) block_copy(d.s, e);
    Ta& ta = d.admit(e);
    Gate g;
    d.s.hold(d.strand, g);
    d.defer(ta, 0, 1h);
    d.s.settle();
    d.dq->stop();
    g.open();
    REQUIRE(d.s.run_until([&] { return d.dq->idle(); }));
    CHECK(d.written.size() == (fails ? 0 : 1));
    CHECK(d.s.defedb.has_ta(e.ta_id) == !fails);
}
