// The reaper on its own (reaper.hpp) with a real IBDB (fsync off) and real
// content files: which transactions' content goes and when (its verdict), the
// IBDB's ta_done written before the unlink, what it notes for the orphan
// sweep, and content segments, which it never unlinks.
#include "qmgr/reaper.hpp"

#include "tests/unit/qmgr/envelope.hpp"
#include "tests/unit/qmgr/spool.hpp"

using namespace parts_test;

namespace {

const smx::msg::Reply later{451, "4.3.0", "try later"};

// A reaper with the IBDB on a pool of its own, so that a test can hold the
// IBDB's writes and not the unlinks.
struct Reaping {
    Spool s;
    asio::thread_pool ibdb_pool{1}, pool{1};
    std::unique_ptr<Ibdb> ibdb = s.ibdb(ibdb_pool);
    Reaper reaper{s.cfg, s.io.get_executor(), pool, *ibdb};
    ~Reaping() {
        ibdb->flush_sync();
        pool.join();
        ibdb_pool.join();
    }
};

} // namespace

TEST_CASE("reaper: a transaction's content goes once nothing names it, its copy with it",
          "[reaper]") {
    ActiveQueue q;
    // Delivered: its file goes now.
    Ta& sent = *q.admit(envelope({"a@example.net"}));
    q.dispatch(sent, 0);
    q.sent(sent, 0);
    CHECK(Reaper::verdict(sent) == Reaper::Verdict::now);
    CHECK(Reaper::file_of(sent) == sent.content_id());
    // A recipient in DEFEDB: kept.
    Ta& parked = *q.admit(envelope({"a@example.net", "b@example.net"}));
    q.dispatch(parked, 0);
    q.sent(parked, 0);
    q.defer_begin(parked, 1, later, "");
    q.deferred(parked, 1);
    CHECK(Reaper::verdict(parked) == Reaper::Verdict::keep);
    // Back from DEFEDB and delivered: DEFEDB may still hold some of it.
    Ta& back = *q.admit_untracked(envelope({"a@example.net", "b@example.net"}));
    DeferredRcpt rec;
    rec.ta_id = back.id;
    q.due(back, 0, rec);
    q.dispatch(back, 0);
    q.sent(back, 0);
    CHECK(Reaper::verdict(back) == Reaper::Verdict::ask_defedb);
    // `smx delete` removes its content itself.
    Ta& deleted = *q.admit(envelope({"a@example.net"}));
    q.mark_deleted(deleted);
    q.drop(deleted, 0);
    CHECK(Reaper::verdict(deleted) == Reaper::Verdict::keep);
    // In a segment: no file of its own, unless DEFEDB got a copy.
    auto e = envelope({"a@example.net"});
    e.content_id = smx::content::segment_ref(smx::new_ta_id(), 40);
    Ta& seg = *q.admit(e);
    CHECK(Reaper::file_of(seg).empty());
    CHECK(Reaper::file_of(seg, true) == seg.id);
    q.defer_begin(seg, 0, later, "");
    q.deferred(seg, 0);
    CHECK(Reaper::file_of(seg) == seg.id);
}

TEST_CASE("reaper: the unlink waits until IBDB's ta_done is written", "[reaper]") {
    Reaping r;
    Spool& s = r.s;
    Reaper& reaper = r.reaper;
    const auto e = message(s, {"a@example.net"});
    s.log(*r.ibdb, e);
    const std::uint64_t records = r.ibdb->stats().records;
    {
        Gate g;  // the IBDB writes nothing until it opens
        g.hold(r.ibdb_pool);
        reaper.finish(e.ta_id, e.content_id);
        s.drain(r.pool);
        CHECK(fs::exists(s.path(e.ta_id)));
        CHECK(r.ibdb->stats().records == records);
    }
    REQUIRE(s.run_until([&] { return !fs::exists(s.path(e.ta_id)); }));
    CHECK(r.ibdb->stats().records == records + 1);  // ta_done, before the unlink
    // A transaction the log does not hold (its record never written):
    // nothing to wait for.
    const auto never = message(s, {"a@example.net"});
    reaper.drop(never.ta_id, never.content_id);
    REQUIRE(s.run_until([&] { return !fs::exists(s.path(never.ta_id)); }));
}

TEST_CASE("reaper: a content segment is never its to unlink", "[reaper]") {
    Reaping r;
    Spool& s = r.s;
    Reaper& reaper = r.reaper;
    const std::string seg = smx::new_ta_id();
    auto e = envelope({"a@example.net"});
    e.content_id = s.record(seg, e.ta_id, "Subject: x\r\n\r\nx\r\n");
    s.log(*r.ibdb, e);
    reaper.finish(e.ta_id, e.content_id);
    reaper.discard(e.content_id);
    reaper.discard("");
    // One with a file of its own after them: once it is gone, so would be
    // the segment had the reaper taken it.
    const auto last = message(s, {"a@example.net"});
    reaper.finish(last.ta_id, last.content_id);
    REQUIRE(s.run_until([&] { return !fs::exists(s.path(last.ta_id)); }));
    s.drain(r.pool);
    CHECK(fs::exists(smx::content::segment_path(s.cfg.content_dir_abs(), seg)));
}

TEST_CASE("reaper: what it unlinks while an orphan sweep runs, the sweep hears of", "[reaper]") {
    Reaping r;
    Spool& s = r.s;
    Reaper& reaper = r.reaper;
    const auto before = message(s, {"a@example.net"}), finished = message(s, {"a@example.net"}),
               dropped = message(s, {"a@example.net"}), discarded = message(s, {"a@example.net"}),
               after = message(s, {"a@example.net"});
    reaper.finish(before.ta_id, before.content_id);
    reaper.sweep_begin();
    reaper.finish(finished.ta_id, finished.content_id);
    reaper.drop(dropped.ta_id, dropped.content_id);
    reaper.discard(discarded.content_id);
    CHECK_FALSE(reaper.unlinked_during_sweep(before.content_id));
    CHECK(reaper.unlinked_during_sweep(finished.content_id));
    CHECK(reaper.unlinked_during_sweep(dropped.content_id));
    CHECK(reaper.unlinked_during_sweep(discarded.content_id));
    CHECK_FALSE(reaper.unlinked_during_sweep(after.content_id));
    reaper.sweep_end();
    reaper.discard(after.content_id);
    CHECK_FALSE(reaper.unlinked_during_sweep(after.content_id));
    // The next sweep starts with nothing noted.
    reaper.sweep_begin();
    CHECK_FALSE(reaper.unlinked_during_sweep(finished.content_id));
    reaper.sweep_end();
    for (const auto& e : {before, finished, dropped, discarded, after})
        REQUIRE(s.run_until([&] { return !fs::exists(s.path(e.ta_id)); }));
}
