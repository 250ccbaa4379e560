// IBDB: real files in a temp dir under /tmp, real fdatasync.
#include "libsm/crc32c.hpp"
#include "libsm/ids.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/ibdb_record.hpp"

#include <catch2/catch.hpp>

#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <sys/mount.h>
#include <sys/resource.h>

namespace fs = std::filesystem;
namespace asio = boost::asio;
using namespace smx::qmgr;
using namespace std::chrono_literals;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        char tmpl[] = "/tmp/ibdb-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        path = tmpl;
    }
    ~TempDir() {
        std::error_code ec;
        fs::remove_all(path, ec);
    }
};

smx::msg::TaCommit make_ta(std::size_t nrcpt, std::size_t helo_size = 10) {
    smx::msg::TaCommit ta;
    ta.ta_id = smx::new_ta_id();
    ta.client_addr = "127.0.0.1";
    ta.client_name = "localhost";
    ta.helo = std::string(helo_size, 'h');
    ta.sender = "a@example.org";
    for (std::size_t i = 0; i < nrcpt; ++i)
        ta.rcpts.push_back({"r" + std::to_string(i) + "@example.net", ""});
    ta.content_id = ta.ta_id;
    ta.size = 1234;
    ta.arrival_us = smx::now_us();
    return ta;
}

// One owner io_context (QMGR's single thread, here the test thread) and a
// worker pool, with helpers to run the owner until something happened.
struct Env {
    TempDir tmp;
    asio::io_context ctx;
    asio::executor_work_guard<asio::io_context::executor_type> guard{ctx.get_executor()};
    asio::thread_pool pool{2};

    IbdbOptions opts() const {
        IbdbOptions o;
        o.dir = (tmp.path / "ibdb").string();
        o.quarantine_dir = (tmp.path / "quarantine").string();
        // The batching tests below count on exact intervals; the adaptive
        // policy has its own tests (commit_policy_test.cpp and below).
        o.commit_policy = CommitPolicy::Kind::fixed;
        o.commit_interval = 1ms;
        o.completion_delay = 10ms;
        o.idle_retire = 100ms;
        return o;
    }

    template <class Pred>
    bool run_until(Pred done, std::chrono::milliseconds limit = 5000ms) {
        auto end = std::chrono::steady_clock::now() + limit;
        while (!done() && std::chrono::steady_clock::now() < end) ctx.run_for(2ms);
        return done();
    }

    void run_for(std::chrono::milliseconds d) { ctx.run_for(d); }

    // Appends and waits for the ack; returns ok.
    bool commit(Ibdb& db, const smx::msg::TaCommit& ta, std::string* error = nullptr) {
        bool called = false, ok = false;
        db.append_transaction(ta, [&](bool k, const std::string& e) {
            called = true;
            ok = k;
            if (error) *error = e;
        });
        REQUIRE(run_until([&] { return called; }));
        return ok;
    }

    // Commits each in its own batch (one record after the other in the file).
    std::vector<smx::msg::TaCommit> commit_all(std::vector<smx::msg::TaCommit> tas) {
        Ibdb db(ctx.get_executor(), pool, opts());
        db.recover();
        for (auto& ta : tas) REQUIRE(commit(db, ta));
        return tas;
    }

    std::vector<std::string> log_files() const {
        std::vector<std::string> v;
        std::error_code ec;
        for (auto& de : fs::directory_iterator(tmp.path / "ibdb", ec))
            v.push_back(de.path().filename().string());
        std::sort(v.begin(), v.end());
        return v;
    }

    std::uintmax_t file_size(const std::string& name) const {
        return fs::file_size(tmp.path / "ibdb" / name);
    }
};

// A small tmpfs at p, unmounted again at the end of the scope. Root only:
// the test cases that use it are tagged [root], which scripts/lib/unit_tests.py
// reports as skipped without root; with root, not mounting is a failure.
struct Tmpfs {
    fs::path p;
    Tmpfs(fs::path path, const char* opts) : p(std::move(path)) {
        fs::create_directories(p);
        const int rc = ::mount("tmpfs", p.c_str(), "tmpfs", 0, opts);
        const int err = errno;
        INFO("mount a tmpfs at " << p << ": " << std::strerror(err));
        REQUIRE(rc == 0);
    }
    ~Tmpfs() { ::umount2(p.c_str(), MNT_DETACH); }
};

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), {}};
}

void spit(const fs::path& p, const std::string& data) {
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    out << data;
}

// Start offsets of the valid records of a log file.
std::vector<std::size_t> record_offsets(const std::string& data) {
    std::vector<std::size_t> offs;
    ibdb::Record r;
    for (std::size_t off = 0; off < data.size() &&
                              ibdb::parse_record(data, off, r) == ibdb::Parse::ok;
         off += r.size)
        offs.push_back(off);
    return offs;
}

} // namespace

TEST_CASE("crc32c check value", "[ibdb]") {
    CHECK(smx::crc32c("123456789") == 0xE3069283u);
    CHECK(smx::crc32c("6789", smx::crc32c("12345")) == 0xE3069283u);
    CHECK(smx::crc32c("") == 0u);
}

TEST_CASE("completion payloads round trip and reject bad lengths", "[ibdb]") {
    auto p = ibdb::ref_payload("ABCDEF0123456789A", 7u);
    auto r = ibdb::parse_ref(p, true);
    REQUIRE(r);
    CHECK(r->ta_id == "ABCDEF0123456789A");
    CHECK(r->idx == 7);
    CHECK_FALSE(ibdb::parse_ref(p, false));
    CHECK_FALSE(ibdb::parse_ref("", false));
    CHECK(ibdb::parse_ref(ibdb::ref_payload("X", std::nullopt), false)->ta_id == "X");
}

TEST_CASE("round trip through recover", "[ibdb]") {
    Env env;
    auto a = make_ta(3), b = make_ta(1), c = make_ta(2);
    {
        Ibdb db(env.ctx.get_executor(), env.pool, env.opts());
        REQUIRE(db.recover().empty());
        for (auto* ta : {&a, &b, &c}) REQUIRE(env.commit(db, *ta));
        db.rcpt_done(a.ta_id, 0);
        db.rcpt_deferred(a.ta_id, 2);
        db.ta_done(b.ta_id);
        db.rcpt_done(c.ta_id, 5);  // out of range: ignored
        CHECK(db.pending() == 3);
        db.flush_sync();
        CHECK(db.pending() == 0);
        CHECK(db.stats().transactions == 3);
        CHECK(db.stats().records == 6);
    }
    Ibdb db(env.ctx.get_executor(), env.pool, env.opts());
    auto rec = db.recover();
    REQUIRE(rec.size() == 2);
    CHECK(rec[0].envelope.ta_id == a.ta_id);
    CHECK(rec[0].envelope.helo == a.helo);
    CHECK(rec[0].envelope.sender == a.sender);
    REQUIRE(rec[0].envelope.rcpts.size() == 3);
    CHECK(rec[0].envelope.rcpts[2].addr == a.rcpts[2].addr);
    CHECK(rec[0].envelope.arrival_us == a.arrival_us);
    CHECK(rec[0].rcpt_done == std::vector<bool>{true, false, false});
    CHECK(rec[0].rcpt_deferred == std::vector<bool>{false, false, true});
    CHECK(rec[1].envelope.ta_id == c.ta_id);
    CHECK(rec[1].rcpt_done == std::vector<bool>{false, false});
    CHECK(db.stats().corrupt_records == 0);
}

TEST_CASE("group commit puts many transactions into one fdatasync", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.commit_interval = 300ms;
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    int acked = 0;
    for (int i = 0; i < 50; ++i)
        db.append_transaction(make_ta(1), [&](bool ok, const std::string&) { acked += ok; });
    CHECK(db.pending() == 50);
    REQUIRE(env.run_until([&] { return acked == 50; }));
    CHECK(db.stats().commits == 1);
    CHECK(db.stats().transactions == 50);
    CHECK(db.stats().fsync_us_total >= db.stats().fsync_us_max);
}

TEST_CASE("adaptive: a lone transaction or a burst does not wait for the ceiling", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.commit_policy = CommitPolicy::Kind::adaptive;
    opt.commit_interval = 60s;  // the ceiling never decides here
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    int acked = 0;
    db.append_transaction(make_ta(1), [&](bool ok, const std::string&) { acked += ok; });
    REQUIRE(env.run_until([&] { return acked == 1; }, 5000ms));
    CHECK(db.stats().commits == 1);
    // 20 at the same moment, then nothing: they share one or two commits,
    // long before the ceiling (arrivals paused).
    for (int i = 0; i < 20; ++i)
        db.append_transaction(make_ta(1), [&](bool ok, const std::string&) { acked += ok; });
    REQUIRE(env.run_until([&] { return acked == 21; }, 5000ms));
    CHECK(db.stats().commits <= 3);
}

TEST_CASE("a full batch goes out at once and never exceeds max_batch", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.commit_interval = 60s;  // only max_batch can trigger a write here
    opt.max_batch = 10;
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    std::vector<std::uint64_t> seen;  // transactions committed when each ack ran
    for (int i = 0; i < 35; ++i)
        db.append_transaction(make_ta(1), [&](bool ok, const std::string&) {
            CHECK(ok);
            seen.push_back(db.stats().transactions);
        });
    REQUIRE(env.run_until([&] { return seen.size() == 30; }));
    env.run_for(50ms);
    CHECK(seen.size() == 30);
    CHECK(db.stats().commits == 3);
    CHECK(db.pending() == 5);
    db.flush_sync();
    REQUIRE(seen.size() == 35);
    CHECK(db.stats().commits == 4);
    for (std::size_t i = 0; i < seen.size(); ++i) CHECK(seen[i] == std::min<std::size_t>(35, (i / 10 + 1) * 10));
}

TEST_CASE("the ack runs only after the worker wrote and synced", "[ibdb]") {
    Env env;
    asio::thread_pool one(1);
    std::promise<void> release;
    auto blocked = release.get_future().share();
    asio::post(one, [blocked] { blocked.wait(); });  // hold the only worker

    auto opt = env.opts();
    opt.commit_interval = 0us;
    Ibdb db(env.ctx.get_executor(), one, opt);
    db.recover();
    bool acked = false;
    std::uintmax_t size_at_ack = 0;
    db.append_transaction(make_ta(2), [&](bool ok, const std::string&) {
        CHECK(ok);
        acked = true;
        size_at_ack = env.file_size("00000001.log");
    });
    env.run_for(150ms);
    CHECK_FALSE(acked);
    CHECK(env.log_files().empty());  // the worker has not even created the file
    release.set_value();
    REQUIRE(env.run_until([&] { return acked; }));
    CHECK(size_at_ack > ibdb::header_size);
    CHECK(db.stats().commits == 1);
}

TEST_CASE("completion records alone are written lazily without fsync", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.completion_delay = 300ms;
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    auto ta = make_ta(2);
    REQUIRE(env.commit(db, ta));
    auto size = env.file_size("00000001.log");
    db.rcpt_done(ta.ta_id, 0);
    env.run_for(30ms);
    CHECK(env.file_size("00000001.log") == size);
    CHECK(db.pending() == 1);
    REQUIRE(env.run_until([&] { return db.stats().records == 2; }));
    CHECK(env.file_size("00000001.log") > size);
    CHECK(db.stats().commits == 1);
}

TEST_CASE("ta_done's callback runs once its record is in the file", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.completion_delay = 300ms;
    std::vector<smx::msg::TaCommit> tas{make_ta(1), make_ta(1)};
    bool written = false, unknown = false;
    {
        Ibdb db(env.ctx.get_executor(), env.pool, opt);
        db.recover();
        for (auto& ta : tas) REQUIRE(env.commit(db, ta));
        const auto size = env.file_size("00000001.log");
        db.ta_done(tas[0].ta_id, [&] {
            written = true;
            CHECK(env.file_size("00000001.log") > size);  // the record is in the file
        });
        db.ta_done("6B0000000000000FF", [&] { unknown = true; });  // not in the log: at once
        CHECK(unknown);
        env.run_for(30ms);
        CHECK_FALSE(written);  // still waiting for completion_delay
        REQUIRE(env.run_until([&] { return written; }));
    }
    // What a QMGR killed right after the callback would find: only tas[1].
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    auto got = db.recover();
    REQUIRE(got.size() == 1);
    CHECK(got[0].envelope.ta_id == tas[1].ta_id);
}

TEST_CASE("a torn last record is skipped and cut off", "[ibdb]") {
    Env env;
    auto tas = env.commit_all({make_ta(1), make_ta(2), make_ta(3)});
    auto path = env.tmp.path / "ibdb" / "00000001.log";
    auto good = slurp(path);
    std::string rec;
    ibdb::append_record(rec, ibdb::transaction, smx::msg::envelope_bytes(make_ta(4)));
    spit(path, good + rec.substr(0, rec.size() / 2));

    Ibdb db(env.ctx.get_executor(), env.pool, env.opts());
    auto got = db.recover();
    REQUIRE(got.size() == 3);
    for (std::size_t i = 0; i < 3; ++i) CHECK(got[i].envelope.ta_id == tas[i].ta_id);
    CHECK(fs::file_size(path) == good.size());
    CHECK(db.stats().corrupt_records == 0);
    CHECK_FALSE(fs::exists(env.tmp.path / "quarantine"));
}

TEST_CASE("a corrupt record in the middle is quarantined and the rest recovered", "[ibdb]") {
    Env env;
    auto tas = env.commit_all({make_ta(1), make_ta(2), make_ta(3)});
    auto path = env.tmp.path / "ibdb" / "00000001.log";
    auto data = slurp(path);
    auto offs = record_offsets(data);
    REQUIRE(offs.size() == 3);
    std::size_t bad_size = offs[2] - offs[1];
    SECTION("bad CRC") { data[offs[1] + ibdb::header_size + 3] ^= 0x20; }
    SECTION("bad magic") { data[offs[1]] = 'X'; }
    SECTION("garbage length") { data[offs[1] + 9] = '\x7f'; }
    spit(path, data);

    Ibdb db(env.ctx.get_executor(), env.pool, env.opts());
    auto got = db.recover();
    REQUIRE(got.size() == 2);
    CHECK(got[0].envelope.ta_id == tas[0].ta_id);
    CHECK(got[1].envelope.ta_id == tas[2].ta_id);
    CHECK(db.stats().corrupt_records == 1);
    auto q = env.tmp.path / "quarantine" / ("ibdb-00000001.log-" + std::to_string(offs[1]));
    REQUIRE(fs::exists(q));
    CHECK(fs::file_size(q) == bad_size);
    CHECK(fs::file_size(path) == data.size());  // a middle record is not cut off
}

TEST_CASE("garbage in place of a log never throws", "[ibdb]") {
    Env env;
    fs::create_directories(env.tmp.path / "ibdb");
    std::string junk;
    for (int i = 0; i < 5000; ++i) junk.push_back(static_cast<char>(i * 131 % 251));
    std::string rec;
    ibdb::append_record(rec, ibdb::rcpt_done, ibdb::ref_payload("NOPE", 1u));
    spit(env.tmp.path / "ibdb" / "00000007.log", junk + rec + junk.substr(0, 3000));
    spit(env.tmp.path / "ibdb" / "00000009.log", std::string(100, '\0'));
    spit(env.tmp.path / "ibdb" / "notes.txt", "ignored");
    Ibdb db(env.ctx.get_executor(), env.pool, env.opts());
    std::vector<RecoveredTa> got;
    REQUIRE_NOTHROW(got = db.recover());
    CHECK(got.empty());
    CHECK(db.stats().corrupt_records == 2);  // junk before and after the valid record
    // nothing open: both logs are deleted, new appends go to 00000010.log
    CHECK(env.log_files() == std::vector<std::string>{"notes.txt"});
    REQUIRE(env.commit(db, make_ta(1)));
    CHECK(fs::exists(env.tmp.path / "ibdb" / "00000010.log"));
}

TEST_CASE("files rotate by size and finished files are deleted", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.file_size = 1;  // every write starts a new file
    opt.commit_interval = 0us;
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    std::vector<smx::msg::TaCommit> tas{make_ta(1), make_ta(1), make_ta(2), make_ta(1)};
    for (auto& ta : tas) REQUIRE(env.commit(db, ta));
    CHECK(env.log_files() == std::vector<std::string>{"00000001.log", "00000002.log",
                                                      "00000003.log", "00000004.log"});
    db.ta_done(tas[0].ta_id);
    REQUIRE(env.run_until([&] { return !fs::exists(env.tmp.path / "ibdb/00000001.log"); }));
    db.rcpt_deferred(tas[2].ta_id, 0);
    db.rcpt_done(tas[2].ta_id, 1);  // all final, one in DEFEDB: left the IBDB
    REQUIRE(env.run_until([&] { return !fs::exists(env.tmp.path / "ibdb/00000003.log"); }));
    CHECK(fs::exists(env.tmp.path / "ibdb/00000002.log"));
    db.ta_done(tas[1].ta_id);
    db.ta_done(tas[3].ta_id);
    // Nothing open: the current file goes too once idle.
    REQUIRE(env.run_until([&] { return env.log_files().empty(); }));
    CHECK(db.stats().files_deleted >= 4);
    REQUIRE(env.commit(db, make_ta(1)));
    CHECK(env.log_files().size() == 1);
}

TEST_CASE("recovery rebuilds open counts so old files go when their mail is done", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.file_size = 1;
    opt.commit_interval = 0us;
    std::vector<smx::msg::TaCommit> tas{make_ta(1), make_ta(1), make_ta(1)};
    {
        Ibdb db(env.ctx.get_executor(), env.pool, opt);
        db.recover();
        for (auto& ta : tas) REQUIRE(env.commit(db, ta));
        db.ta_done(tas[1].ta_id);
        db.flush_sync();
    }
    // 00000002.log is unlinked on the worker pool; 00000004.log holds only
    // the ta_done record.
    REQUIRE(env.run_until([&] {
        return env.log_files() ==
               std::vector<std::string>{"00000001.log", "00000003.log", "00000004.log"};
    }));

    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    auto got = db.recover();
    REQUIRE(got.size() == 2);
    CHECK(env.log_files() == std::vector<std::string>{"00000001.log", "00000003.log"});
    REQUIRE(env.commit(db, make_ta(1)));
    CHECK(fs::exists(env.tmp.path / "ibdb/00000005.log"));
    db.ta_done(tas[0].ta_id);
    REQUIRE(env.run_until([&] { return !fs::exists(env.tmp.path / "ibdb/00000001.log"); }));
    CHECK(fs::exists(env.tmp.path / "ibdb/00000003.log"));
}

// Commits a, then a big transaction while break_disk() makes the disk refuse
// it, then c: the failure is reported, the file is cut back to where it was,
// the next batch succeeds, and recovery finds exactly a and c.
void check_failed_write(Env& env, IbdbOptions opt, const std::string& expect,
                        const std::function<void()>& break_disk,
                        const std::function<void()>& mend_disk) {
    opt.commit_interval = 0us;
    auto a = make_ta(2), big = make_ta(1, 20000), c = make_ta(1);
    auto log = fs::path(opt.dir) / "00000001.log";
    {
        Ibdb db(env.ctx.get_executor(), env.pool, opt);
        db.recover();
        REQUIRE(env.commit(db, a));
        auto good = fs::file_size(log);
        break_disk();
        std::string error;
        bool ok = env.commit(db, big, &error);
        mend_disk();
        CHECK_FALSE(ok);
        CHECK_THAT(error, Catch::Contains(expect));
        CHECK(fs::file_size(log) == good);
        CHECK(db.stats().commits == 1);
        REQUIRE(env.commit(db, c));
    }
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    auto got = db.recover();
    REQUIRE(got.size() == 2);
    CHECK(got[0].envelope.ta_id == a.ta_id);
    CHECK(got[1].envelope.ta_id == c.ta_id);
    CHECK(db.stats().corrupt_records == 0);
}

TEST_CASE("a failed write is cut back and the next batch succeeds (EFBIG)", "[ibdb]") {
    Env env;
    auto opt = env.opts();
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    // The file may grow by only half the big record: a real partial write.
    auto limit = [&] {
        rlimit lim = old;
        lim.rlim_cur = fs::file_size(fs::path(opt.dir) / "00000001.log") + 10000;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    };
    check_failed_write(env, opt, "File too large", limit, [&] { ::setrlimit(RLIMIT_FSIZE, &old); });
}

TEST_CASE("a full disk fails the batch, keeps no half record, and recovers (ENOSPC)",
          "[ibdb][root]") {
    Env env;
    auto mnt = env.tmp.path / "mnt";
    Tmpfs tmpfs(mnt, "size=256k");
    auto opt = env.opts();
    opt.dir = (mnt / "ibdb").string();
    auto fill = [&] {
        std::FILE* f = std::fopen((mnt / "filler").c_str(), "w");
        REQUIRE(f);
        std::setvbuf(f, nullptr, _IONBF, 0);
        std::string block(4096, 'x');
        while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {}
        while (std::fputc('x', f) != EOF) {}
        std::fclose(f);
    };
    check_failed_write(env, opt, "No space left on device", fill,
                       [&] { fs::remove(mnt / "filler"); });
}

// Not a test: commits for N transactions from C closed-loop clients (each
// sends its next transaction when the previous one is acked) at a few commit
// intervals. Run with: qmgr-unit "[micro]" -s
TEST_CASE("micro-check: commits per interval", "[.][micro]") {
    const int n = 1000;
    for (int clients : {10, 100}) {
        for (auto interval : {0us, 100us, 1000us, 10000us}) {
            Env env;
            auto opt = env.opts();
            opt.commit_interval = interval;
            Ibdb db(env.ctx.get_executor(), env.pool, opt);
            db.recover();
            int sent = 0, acked = 0;
            std::function<void()> next = [&] {
                if (sent == n) return;
                ++sent;
                db.append_transaction(make_ta(2), [&](bool ok, const std::string&) {
                    acked += ok;
                    next();
                });
            };
            auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < clients; ++i) next();
            REQUIRE(env.run_until([&] { return acked == n; }, 120000ms));
            double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            const auto& s = db.stats();
            std::printf("clients=%3d interval=%5lldus: %4llu commits for %d tx (%.1f tx/commit), "
                        "%.2f s, fsync avg %llu us max %llu us\n",
                        clients, static_cast<long long>(interval.count()),
                        static_cast<unsigned long long>(s.commits), n,
                        double(s.transactions) / double(s.commits), secs,
                        static_cast<unsigned long long>(s.fsync_us_total / s.commits),
                        static_cast<unsigned long long>(s.fsync_us_max));
        }
    }
}

TEST_CASE("on a failed write, content may still go and records are retried with a back-off",
          "[ibdb]") {
    Env env;
    auto opt = env.opts();
    opt.completion_delay = 20ms;
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    auto ta = make_ta(1);
    REQUIRE(env.commit(db, ta));
    // The log may not grow at all now, as on a full disk.
    rlimit lim = old;
    lim.rlim_cur = env.file_size("00000001.log");
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
    bool written = false;
    db.ta_done(ta.ta_id, [&] { written = true; });
    // The callback (which unlinks the content file) runs although the record
    // failed: that is what frees space on a full disk.
    REQUIRE(env.run_until([&] { return written; }));
    env.run_for(700ms);
    const auto failures = db.stats().write_failures;
    ::setrlimit(RLIMIT_FSIZE, &old);
    CHECK(failures >= 2);   // it keeps trying ...
    CHECK(failures <= 8);   // ... 20 ms doubling, not in a loop
    REQUIRE(env.run_until([&] { return env.file_size("00000001.log") > lim.rlim_cur; }));
}

TEST_CASE("with content_dir each commit syncs the content file system; a missing one is refused",
          "[ibdb][root]") {
    Env env;
    auto o = env.opts();
    o.content_dir = (env.tmp.path / "cdb").string();
    REQUIRE_THROWS_AS(Ibdb(env.ctx.get_executor(), env.pool, o), std::runtime_error);
    fs::create_directories(o.content_dir);
    SECTION("the same file system: syncfs alone") {
        Ibdb db(env.ctx.get_executor(), env.pool, o);
        db.recover();
        auto ta = make_ta(2);
        CHECK(env.commit(db, ta));
        CHECK(db.stats().commits == 1);
        db.flush_sync();
        CHECK(Ibdb(env.ctx.get_executor(), env.pool, o).recover().size() == 1);
    }
    SECTION("IBDB on another file system: syncfs, then fdatasync of the IBDB file") {
        Tmpfs tmpfs(env.tmp.path / "ibdb", "size=1m");
        Ibdb db(env.ctx.get_executor(), env.pool, o);
        db.recover();
        CHECK(env.commit(db, make_ta(1)));
        CHECK(db.stats().commits == 1);
    }
}

namespace {

// Options for the overlap tests: the default policy, syncfs of a content
// directory on the IBDB's file system (what lets two writes be out at once).
IbdbOptions overlap_opts(const Env& env) {
    auto o = env.opts();
    o.commit_policy = CommitPolicy::Kind::adaptive;
    o.commit_interval = 1ms;
    o.content_dir = (env.tmp.path / "cdb").string();
    fs::create_directories(o.content_dir);
    return o;
}

// Holds both workers of env.pool until release() (a device that does not
// come back), so that writes stay out.
struct HeldPool {
    std::promise<void> p;
    explicit HeldPool(asio::thread_pool& pool) {
        auto f = p.get_future().share();
        for (int i = 0; i < 2; ++i) asio::post(pool, [f] { f.wait(); });
    }
    void release() { p.set_value(); }
};

} // namespace

TEST_CASE("adaptive: behind a write out longer than the ceiling the next batch goes too; acks "
          "come in order",
          "[ibdb]") {
    Env env;
    auto opt = overlap_opts(env);
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    auto first = make_ta(1);
    REQUIRE(env.commit(db, first));  // the file exists: no write below creates one
    HeldPool held(env.pool);
    std::vector<std::string> acked;
    auto ack = [&](const smx::msg::TaCommit& ta) {
        return [&acked, id = ta.ta_id](bool ok, const std::string&) {
            CHECK(ok);
            acked.push_back(id);
        };
    };
    auto a = make_ta(1), b = make_ta(2), c = make_ta(3);
    db.append_transaction(a, ack(a));
    REQUIRE(env.run_until([&] { return db.pending() == 0; }));  // a is out
    db.append_transaction(b, ack(b));
    // b goes once a has been out for the ceiling, long before a is back.
    REQUIRE(env.run_until([&] { return db.pending() == 0; }, 1000ms));
    db.append_transaction(c, ack(c));
    env.run_for(30ms);
    CHECK(db.pending() == 1);  // never more than two out
    CHECK(acked.empty());
    held.release();
    REQUIRE(env.run_until([&] { return acked.size() == 3; }));
    CHECK(acked == std::vector<std::string>{a.ta_id, b.ta_id, c.ta_id});
    CHECK(db.stats().commits == 4);
    db.flush_sync();
    // Written one behind the other: recovery reads all of them, in order.
    auto got = Ibdb(env.ctx.get_executor(), env.pool, opt).recover();
    REQUIRE(got.size() == 4);
    CHECK(got[1].envelope.ta_id == a.ta_id);
    CHECK(got[2].envelope.ta_id == b.ta_id);
    CHECK(got[3].envelope.ta_id == c.ta_id);
}

TEST_CASE("fixed: a batch waits until the write before it is back", "[ibdb]") {
    Env env;
    auto opt = overlap_opts(env);
    opt.commit_policy = CommitPolicy::Kind::fixed;
    Ibdb db(env.ctx.get_executor(), env.pool, opt);
    db.recover();
    REQUIRE(env.commit(db, make_ta(1)));  // the file exists: no write below creates one
    HeldPool held(env.pool);
    int acked = 0;
    db.append_transaction(make_ta(1), [&](bool ok, const std::string&) { acked += ok; });
    REQUIRE(env.run_until([&] { return db.pending() == 0; }));
    db.append_transaction(make_ta(1), [&](bool ok, const std::string&) { acked += ok; });
    env.run_for(50ms);
    CHECK(db.pending() == 1);
    held.release();
    REQUIRE(env.run_until([&] { return acked == 2; }));
    CHECK(db.stats().commits == 3);
}

TEST_CASE("a failed write fails the write out behind it too, and neither stays in the file",
          "[ibdb]") {
    Env env;
    auto opt = overlap_opts(env);
    ::signal(SIGXFSZ, SIG_IGN);
    rlimit old{};
    ::getrlimit(RLIMIT_FSIZE, &old);
    auto a = make_ta(1), big = make_ta(1, 20000), b = make_ta(1), c = make_ta(1);
    const auto log = fs::path(opt.dir) / "00000001.log";
    {
        Ibdb db(env.ctx.get_executor(), env.pool, opt);
        db.recover();
        REQUIRE(env.commit(db, a));
        const auto good = fs::file_size(log);
        HeldPool held(env.pool);
        std::vector<std::pair<bool, std::string>> results;
        auto note = [&](bool ok, const std::string& e) { results.emplace_back(ok, e); };
        db.append_transaction(big, note);
        REQUIRE(env.run_until([&] { return db.pending() == 0; }));
        db.append_transaction(b, note);
        REQUIRE(env.run_until([&] { return db.pending() == 0; }, 1000ms));  // both out
        // The file may grow by only half the big record.
        rlimit lim = old;
        lim.rlim_cur = good + 10000;
        REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
        held.release();
        REQUIRE(env.run_until([&] { return results.size() == 2; }));
        ::setrlimit(RLIMIT_FSIZE, &old);
        CHECK_FALSE(results[0].first);
        CHECK_THAT(results[0].second, Catch::Contains("File too large"));
        CHECK_FALSE(results[1].first);
        CHECK_THAT(results[1].second, Catch::Contains("behind a failed one"));
        CHECK(fs::file_size(log) == good);
        CHECK(db.stats().commits == 1);
        REQUIRE(env.commit(db, c));
    }
    auto got = Ibdb(env.ctx.get_executor(), env.pool, opt).recover();
    REQUIRE(got.size() == 2);
    CHECK(got[0].envelope.ta_id == a.ta_id);
    CHECK(got[1].envelope.ta_id == c.ta_id);
}
