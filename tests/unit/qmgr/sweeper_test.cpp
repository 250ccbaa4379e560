// The orphan sweeper on its own (sweeper.hpp) over real content files, a real
// DEFEDB on its strand, an ActiveQueue and a Reaper: old files nobody names
// go to quarantine; the active queue's and DEFEDB's never do, nor what the
// reaper unlinks or the queue takes while the sweep runs; a link, a FIFO, a
// directory or an oversized file under an id is removed or skipped, never
// followed or read (docs/design.md, "Trust").
#include "qmgr/sweeper.hpp"

#include "tests/unit/qmgr/envelope.hpp"
#include "tests/unit/qmgr/spool.hpp"

#include <sys/stat.h>

using namespace parts_test;

namespace {

// Each part on a pool of one thread of its own, so that a test can hold
// one: the sweep's listing and the reaper's unlinks, DEFEDB, IBDB.
struct Sweeping {
    Spool s;
    asio::thread_pool pool{1}, db_pool{1}, ibdb_pool{1};
    DefedbStrand strand{db_pool, s.defedb};
    std::unique_ptr<Ibdb> ibdb = s.ibdb(ibdb_pool);
    ActiveQueue queue;
    Reaper reaper{s.cfg, s.io.get_executor(), pool, *ibdb};
    OrphanSweeper sweeper{s.cfg, s.io.get_executor(), pool, queue, strand, reaper};
    ~Sweeping() {
        sweeper.stop();
        s.run_until([&] { return sweeper.idle(); });
        ibdb->flush_sync();
        pool.join();
        db_pool.join();
        ibdb_pool.join();
    }

    // A content file under a new id, last changed an hour ago (orphan_age
    // is ten minutes).
    std::string old_file(const std::string& bytes = "x") {
        const std::string id = smx::new_ta_id();
        Spool::age(s.file(id, bytes), 1h);
        return id;
    }
    // A new id whose path's directory is there: for something else than a
    // file under it.
    std::string slot() {
        const std::string id = smx::new_ta_id();
        fs::create_directories(fs::path(s.path(id)).parent_path());
        return id;
    }
    bool quarantined(const std::string& id) const {
        return fs::exists(fs::path(s.cfg.quarantine_dir_abs()) / ("cdb-" + id));
    }
    bool in_content(const std::string& id) const {
        std::error_code ec;
        return fs::symlink_status(s.path(id), ec).type() != fs::file_type::not_found;
    }
};

} // namespace

TEST_CASE("orphan sweep: old files nobody names go to quarantine, the queue's and DEFEDB's stay",
          "[sweeper]") {
    Sweeping w;
    const std::string orphan = w.old_file("Subject: lost\r\n\r\nlost\r\n");
    // Named by a transaction in memory: by its content id, and (a segment
    // message's DEFEDB copy) by its own id.
    auto queued = envelope({"a@example.net"});
    queued.content_id = w.old_file();
    w.queue.admit(queued);
    auto in_segment = envelope({"a@example.net"});
    in_segment.content_id = smx::content::segment_ref(smx::new_ta_id(), 0);
    w.queue.admit(in_segment);
    Spool::age(w.s.file(in_segment.ta_id, "copy"), 1h);
    // Named by DEFEDB only.
    auto parked = envelope({"a@example.net"});
    parked.content_id = parked.ta_id;
    Spool::age(w.s.file(parked.ta_id, "x"), 1h);
    w.s.park(parked);
    // Too new, or not durable yet (SMTPS's own).
    const std::string young = smx::new_ta_id();
    w.s.file(young, "x");
    const std::string tmp = w.s.path(orphan) + ".tmp";
    std::ofstream(tmp) << "x";
    Spool::age(tmp, 1h);

    w.sweeper.start();
    REQUIRE(w.s.run_until([&] { return w.sweeper.quarantined() > 0; }));
    CHECK(w.sweeper.quarantined() == 1);
    CHECK(w.quarantined(orphan));
    CHECK(Spool::read(w.s.cfg.quarantine_dir_abs() + "/cdb-" + orphan) ==
          "Subject: lost\r\n\r\nlost\r\n");
    CHECK_FALSE(w.in_content(orphan));
    for (const auto& id : {queued.content_id, in_segment.ta_id, parked.ta_id, young}) {
        INFO(id);
        CHECK(w.in_content(id));
        CHECK_FALSE(w.quarantined(id));
    }
    CHECK(fs::exists(tmp));
}

TEST_CASE("orphan sweep: a link, a FIFO, a directory or an oversized file is removed or skipped, "
          "never followed",
          "[sweeper]") {
    Sweeping w;
    const std::string orphan = w.old_file();
    // A link to a file outside the content directory.
    const fs::path target = w.s.dir / "precious";
    std::ofstream(target) << "precious";
    const std::string link = w.slot();
    fs::create_symlink(target, w.s.path(link));
    Spool::age(w.s.path(link), 1h);
    // A FIFO nobody writes to.
    const std::string fifo = w.slot();
    REQUIRE(::mkfifo(w.s.path(fifo).c_str(), 0640) == 0);
    Spool::age(w.s.path(fifo), 1h);
    // A directory with a file in it.
    const std::string dir = w.slot();
    fs::create_directories(w.s.path(dir));
    std::ofstream(fs::path(w.s.path(dir)) / "inside") << "x";
    Spool::age(w.s.path(dir), 1h);
    // Larger than anything smx writes (sparse: nothing to read).
    const std::string big = w.slot();
    std::ofstream(w.s.path(big)).close();
    fs::resize_file(w.s.path(big), 2 * w.s.cfg.server.max_message_size + (2u << 20));
    Spool::age(w.s.path(big), 1h);

    w.sweeper.start();
    REQUIRE(w.s.run_until([&] { return w.sweeper.quarantined() > 0; }));
    CHECK(w.sweeper.quarantined() == 1);
    CHECK(w.quarantined(orphan));
    for (const auto& id : {link, fifo, big}) {
        INFO(id);
        CHECK_FALSE(w.in_content(id));
        CHECK_FALSE(w.quarantined(id));
    }
    CHECK(Spool::read(target.string()) == "precious");
    CHECK(fs::is_directory(w.s.path(dir)));
    CHECK(fs::exists(fs::path(w.s.path(dir)) / "inside"));
    CHECK_FALSE(w.quarantined(dir));
}

TEST_CASE("orphan sweep: what the reaper unlinks, the queue takes or DEFEDB gets while it runs "
          "stays",
          "[sweeper]") {
    Sweeping w;
    const std::string orphan = w.old_file(), unlinked = w.old_file();
    auto taken = envelope({"a@example.net"});
    taken.content_id = w.old_file();
    auto parked = envelope({"a@example.net"});
    parked.content_id = parked.ta_id;
    Spool::age(w.s.file(parked.ta_id, "x"), 1h);
    // The sweep lists the old files, then waits for DEFEDB behind the gate.
    Gate defedb;
    w.s.hold(w.strand, defedb);
    w.sweeper.start();
    w.s.drain(w.pool);
    w.s.settle();
    // Meanwhile: an unlink the pool cannot do yet, a transaction, a deferral.
    Gate unlinks;
    unlinks.hold(w.pool);
    w.reaper.drop(unlinked, unlinked);
    w.queue.admit(taken);
    w.s.park(parked);
    w.s.settle();
    defedb.open();
    REQUIRE(w.s.run_until([&] { return w.sweeper.quarantined() > 0; }));
    CHECK(w.sweeper.quarantined() == 1);
    CHECK(w.quarantined(orphan));
    for (const auto& id : {unlinked, taken.content_id, parked.ta_id}) {
        INFO(id);
        CHECK(w.in_content(id));
        CHECK_FALSE(w.quarantined(id));
    }
    unlinks.open();
    REQUIRE(w.s.run_until([&] { return !w.in_content(unlinked); }));
}
