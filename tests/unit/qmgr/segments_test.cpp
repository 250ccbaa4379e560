// Content segments on QMGR's side (segments.hpp) on their own, over real
// segment files, an ActiveQueue and a real IBDB (fsync off): which record a
// TA_COMMIT may name (age, the future, another transaction's record, its
// size, a FIFO or a link in place of a segment), and the sweep that removes
// only the old segments nothing in memory names, and only once the IBDB has
// written every completion asked for before it.
#include "qmgr/segments.hpp"

#include "tests/unit/qmgr/envelope.hpp"
#include "tests/unit/qmgr/spool.hpp"

#include <sys/stat.h>

using namespace parts_test;

namespace {

struct Segmenting {
    Spool s;
    asio::thread_pool pool{1}, ibdb_pool{1};
    std::unique_ptr<Ibdb> ibdb = s.ibdb(ibdb_pool);
    ActiveQueue queue;
    std::unique_ptr<Segments> segments;

    // Made after the test has set s.cfg.
    void make() {
        segments = std::make_unique<Segments>(s.cfg, s.io.get_executor(), pool, queue, *ibdb);
    }
    ~Segmenting() {
        if (segments) {
            segments->stop();
            s.run_until([&] { return segments->idle(); });
        }
        ibdb->flush_sync();
        pool.join();
        ibdb_pool.join();
    }
    std::string seg_path(const std::string& seg) const {
        return smx::content::segment_path(s.cfg.content_dir_abs(), seg);
    }
    // A segment made `ago` before now, with one record.
    std::string segment(std::chrono::seconds ago) {
        const std::string seg = id_at(smx::now_us() - static_cast<std::uint64_t>(
                                                         std::chrono::microseconds(ago).count()));
        s.record(seg, smx::new_ta_id(), "x");
        return seg;
    }
};

smx::content::SegmentRef ref_of(const std::string& content_id) {
    const auto r = smx::content::parse_segment_ref(content_id);
    REQUIRE(r);
    return *r;
}

const std::string data = "Subject: s\r\n\r\nin a segment\r\n";

} // namespace

TEST_CASE("segments: a TA_COMMIT names its own whole record in a young segment, nothing else",
          "[segments]") {
    Segmenting t;
    t.make();
    Segments& seg = *t.segments;
    const std::string a = smx::new_ta_id(), b = smx::new_ta_id();
    const auto ref = ref_of(t.s.record(smx::new_ta_id(), a, data));
    CHECK(seg.check(ref, a, data.size()).empty());
    CHECK(seg.check(ref, b, data.size()) == "Content record: the record of another transaction");
    CHECK(seg.check(ref, a, data.size() + 1).find("Content record: a record of") == 0);
    CHECK(seg.check({ref.segment, ref.offset + 1}, a, data.size()).find("Content record:") == 0);
    CHECK(seg.check({smx::new_ta_id(), 0}, a, data.size()) ==
          "Content record: No such file or directory");
    // By the time in its name: older than segment_age (30 s), or further
    // ahead than that; a little ahead is a clock a little off.
    const std::uint64_t now = smx::now_us();
    const auto old = ref_of(t.s.record(id_at(now - 40'000'000), a, data));
    CHECK(seg.check(old, a, data.size()) == "Content segment too old");
    const auto ahead = ref_of(t.s.record(id_at(now + 5'000'000), a, data));
    CHECK(seg.check(ahead, a, data.size()).empty());
    const auto future = ref_of(t.s.record(id_at(now + 3'600'000'000), a, data));
    CHECK(seg.check(future, a, data.size()) == "Content segment from the future");
    // What SMTPS's account may put in a segment's place: never opened.
    const std::string fifo = smx::new_ta_id();
    REQUIRE(::mkfifo(t.seg_path(fifo).c_str(), 0640) == 0);
    CHECK(seg.check({fifo, 0}, a, data.size()) == "Content record: a FIFO");
    const std::string link = smx::new_ta_id();
    fs::create_symlink(t.seg_path(ref.segment), t.seg_path(link));
    CHECK(seg.check({link, 0}, a, data.size()) == "Content record: a symbolic link");
}

TEST_CASE("segments: after a sweep nothing older than its cutoff is named, whatever the age says",
          "[segments]") {
    Segmenting t;
    t.make();
    const std::string a = smx::new_ta_id();
    const auto minute = ref_of(t.s.record(id_at(smx::now_us() - 60'000'000), a, data));
    t.segments->start();
    REQUIRE(t.s.run_until([&] { return t.segments->removed() == 1; }));
    // Were the age longer now (as a clock stepped back makes it look), the
    // sweep has removed what was older than its cutoff: still refused.
    t.s.cfg.queue.segment_age = 1h;
    CHECK(t.segments->check(minute, a, data.size()) == "Content segment too old");
}

TEST_CASE("segments: the sweep removes the old segments nothing in memory names, nothing else",
          "[segments]") {
    Segmenting t;
    t.make();
    const std::string old_unnamed = t.segment(60s), young = t.segment(0s);
    auto e = envelope({"a@example.net"});
    const std::string old_named = id_at(smx::now_us() - 60'000'000);
    e.content_id = t.s.record(old_named, e.ta_id, data);
    t.queue.admit(e);
    const fs::path segs = smx::content::segments_dir(t.s.cfg.content_dir_abs());
    std::ofstream(segs / "notes") << "not a segment";
    std::ofstream(segs / (old_unnamed + ".seg.tmp")) << "not a segment";
    t.segments->start();
    REQUIRE(t.s.run_until([&] { return t.segments->removed() > 0; }));
    CHECK(t.segments->removed() == 1);
    CHECK_FALSE(fs::exists(t.seg_path(old_unnamed)));
    CHECK(fs::exists(t.seg_path(old_named)));
    CHECK(fs::exists(t.seg_path(young)));
    CHECK(fs::exists(segs / "notes"));
    CHECK(fs::exists(segs / (old_unnamed + ".seg.tmp")));
}

TEST_CASE("segments: the sweep removes nothing before the IBDB has written the completions "
          "asked for before it",
          "[segments]") {
    Segmenting t;
    t.make();
    const std::string old = t.segment(60s);
    const auto e = message(t.s, {"a@example.net"});
    t.s.log(*t.ibdb, e);
    {
        Gate g;  // the IBDB writes nothing until it opens
        g.hold(t.ibdb_pool);
        t.ibdb->rcpt_done(e.ta_id, 0);  // a completion: a transaction leaving memory
        t.segments->start();
        t.s.drain(t.pool);
        CHECK(fs::exists(t.seg_path(old)));
        CHECK(t.segments->removed() == 0);
    }
    REQUIRE(t.s.run_until([&] { return t.segments->removed() == 1; }));
    CHECK_FALSE(fs::exists(t.seg_path(old)));
}
