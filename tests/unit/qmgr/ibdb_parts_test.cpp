// The IBDB's parts on their own: the job state table and the commit of one
// job on a real file (ibdb_pipeline), the batches and when one is cut
// (ibdb_batcher), and which file holds which transaction (ibdb_files).
// ibdb_test.cpp tests them together through Ibdb.
#include "qmgr/ibdb_batcher.hpp"
#include "qmgr/ibdb_files.hpp"
#include "qmgr/ibdb_pipeline.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace smx::qmgr;
using namespace smx::qmgr::ibdb;
using namespace std::chrono_literals;

namespace {

struct Dir {
    fs::path path;
    Dir() {
        char tmpl[] = "/tmp/ibdb-parts-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~Dir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

std::uint64_t size_of(const fs::path& p) {
    std::error_code ec;
    const auto n = fs::file_size(p, ec);
    return ec ? 0 : n;
}

} // namespace

TEST_CASE("job states: only the steps of the table", "[ibdb]") {
    Job ok;
    ok.step(JobEvent::turn);
    ok.step(JobEvent::wrote);
    ok.step(JobEvent::finish);
    ok.step(JobEvent::ack);
    CHECK(ok.state() == JobState::acked);
    Job unsynced;
    unsynced.step(JobEvent::turn);
    unsynced.step(JobEvent::finish);
    unsynced.step(JobEvent::refuse);  // behind a failed one
    CHECK(unsynced.state() == JobState::refused);
    Job bad;
    bad.step(JobEvent::turn);
    bad.step(JobEvent::error);
    bad.step(JobEvent::refuse);
    CHECK(bad.state() == JobState::refused);
    CHECK(std::string(to_string(JobState::syncing)) == "syncing");
}

TEST_CASE("run_commit writes in turn, creates the file, syncs, and cuts back on failure",
          "[ibdb]") {
    Dir d;
    Lane lane;
    Job first;
    first.dir = d.path.string();
    first.file = 7;
    first.open_file = true;
    first.buf = "records of one batch";
    first.sync = true;
    first.seq = 0;
    run_commit(first, lane);
    CHECK(first.err == 0);
    CHECK(first.opened);
    CHECK(first.state() == JobState::written);
    const fs::path log = d.path / file_name(7);
    CHECK(size_of(log) == first.buf.size());

    // The next one in turn appends; a third, behind a cut, never writes.
    Job second;
    second.fd = first.fd;
    second.off = first.buf.size();
    second.buf = "more";
    second.seq = 1;
    run_commit(second, lane);
    CHECK(second.state() == JobState::written);  // nothing to sync: not asked
    CHECK(size_of(log) == first.buf.size() + 4);

    // A failed write (a bad descriptor) cuts nothing it did not write, and
    // every job behind it is refused its write.
    Job broken;
    broken.fd = -1;
    broken.off = size_of(log);
    broken.buf = "x";
    broken.seq = 2;
    run_commit(broken, lane);
    CHECK(broken.err == EBADF);
    CHECK(broken.state() == JobState::failed);
    CHECK(lane.cut);
    Job behind;
    behind.fd = first.fd;
    behind.off = broken.off;
    behind.buf = "not written";
    behind.seq = 3;
    run_commit(behind, lane);
    CHECK(behind.err == ECANCELED);
    CHECK(behind.state() == JobState::failed);
    CHECK(size_of(log) == first.buf.size() + 4);
    ::close(first.fd);
}

TEST_CASE("the pipeline settles jobs in the order they went out; a failure fails those behind",
          "[ibdb]") {
    Dir d;
    boost::asio::io_context io;
    boost::asio::thread_pool pool(2);
    // Runs the owner until every job out is settled (the workers post their
    // results to it), for at most about 20 s. The guard of the drain before
    // stopped the io_context when it went.
    auto drain = [&](const CommitPipeline& p) {
        io.restart();
        auto guard = boost::asio::make_work_guard(io);
        for (int i = 0; i < 10000 && p.out() > 0; ++i) io.run_for(std::chrono::milliseconds(2));
        REQUIRE(p.out() == 0);
    };
    std::vector<std::pair<std::uint64_t, JobState>> settled;
    std::vector<std::string> acked;
    int nexts = 0;
    CommitPipeline p(io.get_executor(), pool,
                     [&](Job& j) {
                         settled.emplace_back(j.seq, j.state());
                         return j.err ? std::string("failed") : std::string();
                     },
                     [&] { ++nexts; });
    auto job = [&](int fd, std::uint64_t off, std::string buf, std::string id) {
        auto j = std::make_shared<Job>();
        j->dir = d.path.string();
        j->fd = fd;
        j->off = off;
        j->buf = std::move(buf);
        j->acks.push_back([&acked, id](bool ok, const std::string& err) {
            acked.push_back(id + (ok ? ":ok" : ":" + err));
        });
        return j;
    };
    const int fd = ::open((d.path / "log").c_str(), O_RDWR | O_CREAT, 0600);
    REQUIRE(fd >= 0);
    p.start(job(fd, 0, "aaaa", "a"));
    p.start(job(fd, 4, "bbbb", "b"));
    CHECK(p.out() == 2);
    drain(p);
    CHECK(settled == std::vector<std::pair<std::uint64_t, JobState>>{{0, JobState::acked},
                                                                      {1, JobState::acked}});
    CHECK(acked == std::vector<std::string>{"a:ok", "b:ok"});
    CHECK(nexts >= 1);

    // One that fails and one behind it (written fine, or refused its turn):
    // both refused, and the one after them goes again.
    settled.clear();
    acked.clear();
    p.start(job(-1, 8, "cccc", "c"));
    p.start(job(fd, 8, "dddd", "d"));
    drain(p);
    CHECK(settled.size() == 2);
    CHECK(settled[0].second == JobState::refused);
    CHECK(settled[1].second == JobState::refused);
    CHECK(acked == std::vector<std::string>{"c:failed", "d:failed"});
    CHECK_FALSE(p.failing());
    p.start(job(fd, 8, "eeee", "e"));
    drain(p);
    CHECK(acked.back() == "e:ok");
    CHECK(size_of(d.path / "log") == 12);

    // flush: what is out, then what `more` gives, on this thread.
    int given = 0;
    p.start(job(fd, 12, "ffff", "f"));
    p.flush([&]() -> std::shared_ptr<Job> {
        return given++ < 2 ? job(fd, 16 + 4 * (given - 1), "gggg", "g") : nullptr;
    });
    CHECK(acked.size() == 6);  // c, d, e, f and the two flush gave
    CHECK(size_of(d.path / "log") == 24);
    ::close(fd);
    pool.join();
}

TEST_CASE("batches: transactions fill the back one, completions ride the front one", "[ibdb]") {
    IbdbOptions opt;
    opt.max_batch = 2;
    opt.commit_policy = CommitPolicy::Kind::fixed;
    opt.commit_interval = 1000us;
    opt.completion_delay = 50ms;
    Batcher b(opt);
    CHECK(b.empty());
    const auto now = Batcher::Clock::now();
    CHECK_FALSE(b.due(now, std::nullopt, false));
    for (int i = 0; i < 3; ++i) b.add_transaction("T" + std::to_string(i), "env", [](bool, const std::string&) {});
    b.add_completion(rcpt_done, ref_payload("T0", 0u));
    CHECK(b.pending() == 4);
    // Full: at once, alone; behind a write out only when it may overlap.
    const auto due = b.due(Batcher::Clock::now(), std::nullopt, false);
    REQUIRE(due);
    CHECK(*due <= Batcher::Clock::now());
    CHECK_FALSE(b.due(Batcher::Clock::now(), Batcher::Clock::now(), false));
    auto first = b.take();
    CHECK(first.acks.size() == 2);
    CHECK(first.done_records == 1);
    auto second = b.take();
    CHECK(second.acks.size() == 1);  // not full: the fixed policy's interval
    CHECK(b.empty());

    // Completion records alone wait for completion_delay, and never beside a
    // write out; a failed write's come back in front, after a back-off.
    b.add_completion(ta_done, ref_payload("T1", std::nullopt));
    CHECK_FALSE(b.due(Batcher::Clock::now(), Batcher::Clock::now(), true));
    const auto lazy = b.due(Batcher::Clock::now(), std::nullopt, false);
    REQUIRE(lazy);
    CHECK(*lazy > Batcher::Clock::now());
    std::function<void()> cb = [] {};
    CHECK(b.after_front(cb));
    auto c = b.take();
    CHECK(c.written.size() == 1);
    std::function<void()> none = [] {};
    CHECK_FALSE(b.after_front(none));
    b.write_failed();
    b.retry_completions("XY", 2, true);
    b.retry_completions("Z", 1, false);
    b.add_completion(rcpt_done, ref_payload("T2", 0u));
    auto r = b.take();
    CHECK(r.done.substr(0, 3) == "XYZ");
    CHECK(r.done_records == 4);
}

TEST_CASE("log files: a file goes once nothing open is in it and it is not appended to",
          "[ibdb]") {
    Dir d;
    boost::asio::thread_pool pool(1);
    IbdbStats stats;
    LogFiles f(d.path.string(), false, pool, stats);
    CHECK(f.fd() < 0);
    CHECK(f.next_number() == 1);
    std::ofstream(d.path / file_name(1)) << "x";
    std::ofstream(d.path / file_name(2)) << "x";
    const int fd1 = ::open((d.path / file_name(1)).c_str(), O_RDWR);
    f.switched(1, fd1);
    CHECK(f.current() == 1);
    f.logging("A", 2);
    f.logging("B", 1);
    CHECK(f.holds("A"));
    f.placed("A");
    f.placed("B");
    f.wrote(100);
    CHECK(f.end() == 100);
    // A recipient not in the log, a second placement: nothing changes.
    CHECK_FALSE(f.mark("A", 5, rcpt_done));
    CHECK_FALSE(f.mark("Z", 0, rcpt_done));
    const int fd2 = ::open((d.path / file_name(2)).c_str(), O_RDWR);
    f.switched(2, fd2);  // rotation: 1 still holds A and B
    CHECK(fs::exists(d.path / file_name(1)));
    CHECK(f.mark("A", 0, rcpt_done));
    CHECK(f.mark("A", 1, rcpt_deferred));  // every recipient final, one in DEFEDB: A leaves
    CHECK_FALSE(f.holds("A"));
    CHECK(f.done("B"));
    CHECK_FALSE(f.done("B"));
    pool.join();  // the unlink is the pool's
    CHECK_FALSE(fs::exists(d.path / file_name(1)));
    CHECK(stats.files_deleted == 1);
    // A transaction whose write failed is not in the log.
    f.logging("C", 1);
    f.not_placed("C");
    CHECK_FALSE(f.holds("C"));
    CHECK(f.empty());
    f.close();  // nothing open: the current file goes
    CHECK_FALSE(fs::exists(d.path / file_name(2)));
}
