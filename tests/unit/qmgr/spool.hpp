// A temporary spool for the unit tests of QMGR's components on their own
// (deferred_test, bounce_test, reaper_test, sweeper_test, segments_test,
// defedb_strand_test): a config over it, a real DEFEDB, an event loop the
// test runs, an IBDB without fsync on a pool the test gives, content files
// and segment records, and gates that hold a pool thread (or the DEFEDB
// strand) until the test opens them, so that "while X is out" is an event
// the test makes, never a race it hopes to win.
#pragma once

#include "qmgr/defedb.hpp"
#include "qmgr/defedb_strand.hpp"
#include "qmgr/ibdb.hpp"

#include "libsm/config.hpp"
#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"
#include "libsm/panic.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace parts_test {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace smx::qmgr;
using namespace std::chrono_literals;

// Holds whatever waits behind it (a pool thread, the DEFEDB strand) until
// open(); opened when it goes, so that a failed test does not hang in a
// pool's join. Its state is shared with the job that waits on it.
class Gate {
public:
    ~Gate() { open(); }
    void open() {
        std::lock_guard lock(s_->m);
        s_->open = true;
        s_->cv.notify_all();
    }
    bool entered() const {
        std::lock_guard lock(s_->m);
        return s_->entered;
    }
    // A job that says it has started and waits until open().
    auto job() {
        return [s = s_] {
            std::unique_lock lock(s->m);
            s->entered = true;
            s->cv.notify_all();
            s->cv.wait(lock, [&] { return s->open; });
        };
    }
    void hold(asio::thread_pool& pool) { asio::post(pool, job()); }

private:
    struct State {
        mutable std::mutex m;
        std::condition_variable cv;
        bool open = false, entered = false;
    };
    std::shared_ptr<State> s_ = std::make_shared<State>();
};

// An id made at unix time us (new_ta_id's layout): segments that are old,
// or from the future.
inline std::string id_at(std::uint64_t us) {
    static unsigned counter = 0;
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08llX%05llX%04X",
                  static_cast<unsigned long long>(us / 1000000),
                  static_cast<unsigned long long>(us % 1000000), ++counter & 0x7ff);
    return buf;
}

struct Spool {
    fs::path dir;
    smx::Config cfg;
    Defedb defedb;
    asio::io_context io;

    Spool() {
        char tmpl[] = "/tmp/qmgr-parts-XXXXXX";
        REQUIRE(::mkdtemp(tmpl));
        dir = tmpl;
        cfg.queue.spool_dir = dir.string();
        cfg.queue.run_dir = dir.string();
        cfg.queue.min_free_space = 0;
        // load_config's default: mail from here gets whole returns and DSNs.
        cfg.server.relay_networks = {smx::parse_cidr("server.relay_networks", "127.0.0.0/8")};
        for (const auto& d : {cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(), cfg.quarantine_dir_abs(),
                              smx::content::segments_dir(cfg.content_dir_abs())})
            fs::create_directories(d);
        std::string err;
        REQUIRE(defedb.open(cfg.defedb_dir_abs(), cfg.quarantine_dir_abs(), err));
    }
    ~Spool() {
        defedb.close();  // before its files go
        std::error_code ec;
        fs::remove_all(dir, ec);
    }

    // An IBDB without fsync on pool, recovered (empty) and ready for appends.
    std::unique_ptr<Ibdb> ibdb(asio::thread_pool& pool) {
        IbdbOptions o;
        o.dir = cfg.ibdb_dir_abs();
        o.quarantine_dir = cfg.quarantine_dir_abs();
        o.commit_interval = 200us;
        o.completion_delay = 1ms;
        o.fsync = false;
        auto db = std::make_unique<Ibdb>(io.get_executor(), pool, o);
        REQUIRE(db->recover().empty());
        return db;
    }
    // A transaction record, durable in ibdb.
    void log(Ibdb& db, const smx::msg::TaCommit& e) {
        std::optional<bool> ok;
        db.append_transaction(e, [&](bool good, const std::string&) { ok = good; });
        REQUIRE(run_until([&] { return ok.has_value(); }));
        REQUIRE(*ok);
    }

    // Every recipient of e in DEFEDB, due in an hour.
    void park(const smx::msg::TaCommit& e) {
        for (std::uint32_t i = 0; i < e.rcpts.size(); ++i) {
            DeferredRcpt r;
            r.ta_id = e.ta_id;
            r.idx = i;
            r.addr = e.rcpts[i].addr;
            r.next_try_us = smx::now_us() + 3'600'000'000;
            defedb.put_deferred(e, r);
        }
    }

    // Runs the event loop until p() holds, for at most `limit` (a bound for
    // a broken build, never a wait the test relies on).
    template <class Pred>
    bool run_until(Pred p, std::chrono::milliseconds limit = 5000ms) {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (!p() && std::chrono::steady_clock::now() < end) {
            io.restart();
            io.run_for(2ms);
        }
        return p();
    }
    // Runs every handler that is ready, and those they make ready, until none
    // is: a coroutine is then suspended on a timer or on a pool's work.
    void settle() {
        do io.restart();
        while (io.poll() > 0);
    }
    // Waits until every job posted to pool (of one thread) so far has run,
    // those the event loop still had to post included.
    void drain(asio::thread_pool& pool) {
        settle();
        auto ran = std::make_shared<std::atomic<bool>>(false);
        asio::post(pool, [ran] { *ran = true; });
        REQUIRE(run_until([&] { return ran->load(); }));
    }
    // Holds the DEFEDB strand: DEFEDB calls made after this wait for g.
    void hold(DefedbStrand& strand, Gate& g) {
        asio::co_spawn(io, held(strand, g.job()), smx::crash_on_exception("test gate"));
        REQUIRE(run_until([&] { return g.entered(); }));
    }
    static asio::awaitable<void> held(DefedbStrand& strand, std::function<void()> job) {
        // Named before the co_await (GCC 12, see coro.hpp).
        auto wait = [job](Defedb&) {
            job();
            return true;
        };
        co_await strand.run(std::move(wait));
    }

    std::string path(const std::string& id) const {
        return smx::content::file_path(cfg.content_dir_abs(), id, cfg.queue.cdb_hashed);
    }
    // A content file with these bytes under id.
    std::string file(const std::string& id, const std::string& bytes) {
        const std::string p = path(id);
        fs::create_directories(fs::path(p).parent_path());
        std::ofstream(p, std::ios::binary) << bytes;
        return p;
    }
    // Appends ta_id's record to segment seg; returns its reference.
    std::string record(const std::string& seg, const std::string& ta_id, const std::string& data) {
        const std::string p = smx::content::segment_path(cfg.content_dir_abs(), seg);
        const int fd = ::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
        REQUIRE(fd >= 0);
        struct stat st;
        REQUIRE(::fstat(fd, &st) == 0);
        const auto off = static_cast<std::uint64_t>(st.st_size);
        REQUIRE(smx::content::write_segment_record(fd, off, ta_id, data) == 0);
        ::close(fd);
        return smx::content::segment_ref(seg, off);
    }
    // A file's modification time moved into the past (the link itself for
    // a symbolic link), as the orphan sweep and smx::content::list see it.
    static void age(const std::string& p, std::chrono::seconds by) {
        timespec t[2];
        REQUIRE(::clock_gettime(CLOCK_REALTIME, &t[0]) == 0);
        t[0].tv_sec -= by.count();
        t[1] = t[0];
        REQUIRE(::utimensat(AT_FDCWD, p.c_str(), t, AT_SYMLINK_NOFOLLOW) == 0);
    }
    static std::string read(const std::string& p) {
        std::ifstream in(p, std::ios::binary);
        return {std::istreambuf_iterator<char>(in), {}};
    }
};

// A TA_COMMIT from a relay client (127.0.0.1) with its message in a content
// file of its own.
inline smx::msg::TaCommit message(Spool& s, std::vector<std::string> rcpts,
                                 const std::string& bytes = "Subject: test\r\n\r\nbody\r\n") {
    smx::msg::TaCommit e;
    e.ta_id = e.content_id = smx::new_ta_id();
    e.sender = "s@example.org";
    e.client_addr = "127.0.0.1";
    e.arrival_us = smx::now_us();
    for (auto& r : rcpts) e.rcpts.push_back({r, ""});
    s.file(e.ta_id, bytes);
    e.size = bytes.size();
    return e;
}

} // namespace parts_test
