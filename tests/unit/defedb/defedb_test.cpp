// DEFEDB against a real Berkeley DB environment in a temporary directory.
#include "qmgr/defedb.hpp"
#include "qmgr/defedb_record.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using smx::qmgr::Defedb;
using smx::qmgr::DeferredRcpt;
using smx::qmgr::DeferredTa;

namespace {

struct TempDir {
    fs::path path;
    TempDir() {
        std::string t = (fs::temp_directory_path() / "defedb-test-XXXXXX").string();
        REQUIRE(mkdtemp(t.data()) != nullptr);
        path = t;
    }
    ~TempDir() { fs::remove_all(path); }
    std::string db() const { return (path / "defedb").string(); }
    std::string quarantine() const { return (path / "quarantine").string(); }
};

std::string ta_id(unsigned n) {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%017X", n + 0x1000u);
    return buf;
}

smx::msg::TaCommit envelope(const std::string& id, unsigned nrcpt) {
    smx::msg::TaCommit ta;
    ta.ta_id = id;
    ta.content_id = id;
    ta.client_addr = "127.0.0.1";
    ta.client_name = "localhost";
    ta.helo = "client.example";
    ta.sender = "sender@example.org";
    for (unsigned i = 0; i < nrcpt; ++i) ta.rcpts.push_back({"rcpt" + std::to_string(i) + "@example.net", ""});
    ta.size = 1234;
    ta.arrival_us = 1'700'000'000'000'000;
    return ta;
}

DeferredRcpt rcpt(const std::string& id, std::uint32_t idx, std::uint64_t next_try) {
    DeferredRcpt r;
    r.ta_id = id;
    r.idx = idx;
    r.addr = "rcpt" + std::to_string(idx) + "@example.net";
    r.attempts = 1;
    r.first_arrival_us = 1'700'000'000'000'000;
    r.last_attempt_us = next_try - 300'000'000;
    r.next_try_us = next_try;
    r.last_reply = {451, "4.3.0", "try again later"};
    r.last_relay = "mx.example.net[192.0.2.1]:25";
    return r;
}

bool open_ok(Defedb& db, const TempDir& d) {
    std::string err;
    bool ok = db.open(d.db(), d.quarantine(), err);
    INFO(err);
    return ok;
}

std::vector<std::pair<std::string, std::uint32_t>> flat(const std::vector<DeferredTa>& tas) {
    std::vector<std::pair<std::string, std::uint32_t>> out;
    for (const auto& ta : tas)
        for (const auto& r : ta.rcpts) out.emplace_back(r.ta_id, r.idx);
    return out;
}

constexpr std::uint64_t T = 1'800'000'000'000'000;  // "now" in the tests

} // namespace

TEST_CASE("defedb: put, due order, update, remove") {
    TempDir d;
    Defedb db;
    REQUIRE(open_ok(db, d));
    auto a = envelope(ta_id(1), 3), b = envelope(ta_id(2), 1);
    db.put_deferred(a, rcpt(a.ta_id, 0, T + 30));
    db.put_many({DeferredTa{a, {rcpt(a.ta_id, 2, T - 10)}}, DeferredTa{b, {rcpt(b.ta_id, 0, T - 20)}}});
    CHECK(db.count() == 3);
    CHECK(db.next_due_time() == T - 20);

    auto due = db.due(T, 10);
    REQUIRE(due.size() == 2);  // b first (T-20), then a (T-10); a's idx 0 is not due
    CHECK(due[0].envelope.ta_id == b.ta_id);
    CHECK(due[0].envelope.sender == "sender@example.org");
    CHECK(due[0].envelope.rcpts.size() == 1);
    REQUIRE(due[1].rcpts.size() == 1);
    CHECK(due[1].rcpts[0].idx == 2);
    CHECK(due[1].rcpts[0].last_reply == smx::msg::Reply{451, "4.3.0", "try again later"});
    CHECK(due[1].rcpts[0].last_relay == "mx.example.net[192.0.2.1]:25");
    CHECK(due[1].envelope.rcpts.size() == 3);
    CHECK(db.due(T, 1).size() == 1);

    // Another failure: attempts and next try move, the address stays.
    auto r = rcpt(a.ta_id, 2, T + 100);
    r.attempts = 2;
    r.addr = "ignored@example.net";
    r.last_reply = {451, "4.4.1", "connect to [127.0.0.1]:2600: Connection refused"};
    r.last_relay.clear();
    CHECK(db.update(r));
    CHECK_FALSE(db.update(rcpt(a.ta_id, 1, T)));  // never deferred
    auto now_due = flat(db.due(T, 10));
    CHECK(now_due == std::vector<std::pair<std::string, std::uint32_t>>{{b.ta_id, 0}});
    auto later = db.due(T + 1000, 10);
    REQUIRE(later.size() == 2);
    CHECK(later[0].envelope.ta_id == b.ta_id);
    REQUIRE(later[1].rcpts.size() == 2);
    CHECK(later[1].rcpts[0].idx == 0);  // T+30 before T+100
    CHECK(later[1].rcpts[1].attempts == 2);
    CHECK(later[1].rcpts[1].addr == "rcpt2@example.net");
    CHECK(later[1].rcpts[1].last_reply ==
          smx::msg::Reply{451, "4.4.1", "connect to [127.0.0.1]:2600: Connection refused"});
    CHECK(later[1].rcpts[1].last_relay.empty());  // no server replied

    CHECK(db.remove(b.ta_id, 0));
    CHECK_FALSE(db.remove(b.ta_id, 0));
    CHECK(db.count() == 2);
    CHECK(db.next_due_time() == T + 30);
}

TEST_CASE("defedb: the envelope goes with its last recipient") {
    TempDir d;
    Defedb db;
    REQUIRE(open_ok(db, d));
    auto a = envelope(ta_id(7), 2);
    db.put_many({DeferredTa{a, {rcpt(a.ta_id, 0, T), rcpt(a.ta_id, 1, T)}}});
    CHECK(db.remove(a.ta_id, 0));
    std::size_t envelopes = 0;
    db.for_each([&](const DeferredTa& ta) {
        ++envelopes;
        CHECK(ta.envelope.sender == "sender@example.org");
    });
    CHECK(envelopes == 1);
    CHECK(db.remove(a.ta_id, 1));
    CHECK(db.count() == 0);
    // Deferred again under the same id: a fresh envelope is written.
    auto a2 = envelope(a.ta_id, 1);
    a2.sender = "other@example.org";
    db.put_deferred(a2, rcpt(a.ta_id, 0, T));
    auto due = db.due(T, 10);
    REQUIRE(due.size() == 1);
    CHECK(due[0].envelope.sender == "other@example.org");
    CHECK(db.remove_ta(a.ta_id) == 1);
    CHECK(db.due(T, 10).empty());
    CHECK_FALSE(db.next_due_time());
}

TEST_CASE("defedb: get, held, flush_all (with a pick), lease") {
    TempDir d;
    Defedb db;
    REQUIRE(open_ok(db, d));
    auto a = envelope(ta_id(1), 2), b = envelope(ta_id(2), 1);
    db.put_many({DeferredTa{a, {rcpt(a.ta_id, 0, T + 500), rcpt(a.ta_id, 1, T + 600)}},
                 DeferredTa{b, {rcpt(b.ta_id, 0, T + 700)}}});
    CHECK(db.due(T, 10).empty());
    // smx show: one transaction with its envelope.
    auto got = db.get(a.ta_id);
    REQUIRE(got);
    CHECK(got->envelope.ta_id == a.ta_id);
    CHECK(got->envelope.size == a.size);
    CHECK(got->rcpts.size() == 2);
    CHECK_FALSE(db.get(ta_id(99)));
    // smx requeue: only what the pick takes moves, and only if not due yet.
    CHECK(db.flush_all(T + 650, [](const DeferredRcpt& r) { return r.idx == 1; }) == 0);
    CHECK(db.flush_all(T + 550, [](const DeferredRcpt& r) { return r.idx == 1; }) == 1);
    CHECK(db.next_due_time() == T + 500);
    CHECK(db.flush_all(T + 500, [&](const DeferredRcpt& r) { return r.ta_id == b.ta_id; }) == 1);
    CHECK(db.next_due_time() == T + 500);
    CHECK(db.set_held(a.ta_id, true) == 2);
    CHECK(db.set_held(ta_id(99), true) == 0);
    CHECK(db.next_due_time() == T + 500);  // held ones are not in the index
    CHECK(db.flush_all(T) == 1);            // only b: a is held
    CHECK(flat(db.due(T, 10)) == std::vector<std::pair<std::string, std::uint32_t>>{{b.ta_id, 0}});
    bool seen_held = false;
    db.for_each([&](const DeferredTa& ta) {
        if (ta.envelope.ta_id == a.ta_id) {
            REQUIRE(ta.rcpts.size() == 2);
            seen_held = ta.rcpts[0].held && ta.rcpts[1].held;
        }
    });
    CHECK(seen_held);
    CHECK(db.set_held(a.ta_id, false) == 2);
    CHECK(db.next_due_time() == T);
    CHECK(db.flush_all(T) == 2);

    // A lease moves what due() returns out of the way until it ends.
    auto first = db.due(T, 2, T + 60'000'000);
    CHECK(flat(first).size() == 2);
    auto second = flat(db.due(T, 10, T + 60'000'000));
    REQUIRE(second.size() == 1);
    for (auto& x : flat(first)) CHECK(x != second[0]);
    CHECK(db.due(T, 10).empty());
    CHECK(flat(db.due(T + 60'000'000, 10)).size() == 3);
}

TEST_CASE("defedb: the warned flag is kept apart from held") {
    TempDir d;
    Defedb db;
    REQUIRE(open_ok(db, d));
    auto a = envelope(ta_id(1), 1);
    auto r = rcpt(a.ta_id, 0, T + 500);
    r.warned = true;
    db.put_many({DeferredTa{a, {r}}});
    CHECK(db.next_due_time() == T + 500);  // warned, not held: still indexed
    CHECK(db.set_held(a.ta_id, true) == 1);
    CHECK_FALSE(db.next_due_time());
    CHECK(db.set_held(a.ta_id, false) == 1);
    auto due = db.due(T + 500, 10);
    REQUIRE(due.size() == 1);
    CHECK(due[0].rcpts[0].warned);
    CHECK_FALSE(due[0].rcpts[0].held);
}

TEST_CASE("defedb: reopen keeps everything") {
    TempDir d;
    {
        Defedb db;
        REQUIRE(open_ok(db, d));
        for (unsigned i = 0; i < 20; ++i) {
            auto e = envelope(ta_id(i), 2);
            db.put_many({DeferredTa{e, {rcpt(e.ta_id, 0, T + i), rcpt(e.ta_id, 1, T + 100 + i)}}});
        }
        db.set_held(ta_id(3), true);
        db.checkpoint();
        auto r = rcpt(ta_id(5), 1, T + 1);
        r.attempts = 9;
        CHECK(db.update(r));
        CHECK(db.remove(ta_id(6), 0));
    }  // closed here; the update and remove were committed without sync
    Defedb db;
    REQUIRE(open_ok(db, d));
    CHECK(db.count() == 39);
    std::size_t tas = 0, rcpts = 0;
    db.for_each([&](const DeferredTa& ta) {
        ++tas;
        rcpts += ta.rcpts.size();
        for (const auto& r : ta.rcpts) {
            CHECK(r.held == (ta.envelope.ta_id == ta_id(3)));
            if (r.ta_id == ta_id(5) && r.idx == 1) CHECK(r.attempts == 9);
        }
    });
    CHECK(tas == 20);
    CHECK(rcpts == 39);
    auto due = flat(db.due(T + 1000, 100));
    CHECK(due.size() == 37);  // 39 less the two held
}

TEST_CASE("defedb: a killed process loses nothing committed") {
    TempDir d;
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {  // no close(), no checkpoint: like kill -9
        Defedb db;
        std::string err;
        if (!db.open(d.db(), d.quarantine(), err)) _exit(1);
        for (unsigned i = 0; i < 10; ++i) {
            auto e = envelope(ta_id(i), 1);
            db.put_deferred(e, rcpt(e.ta_id, 0, T + i));
        }
        auto r = rcpt(ta_id(4), 0, T + 50);
        r.attempts = 3;
        db.update(r);           // committed without sync: survives a process crash
        db.remove(ta_id(9), 0);
        _exit(0);
    }
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    Defedb db;
    REQUIRE(open_ok(db, d));  // runs recovery
    CHECK(db.count() == 9);
    auto due = db.due(T + 100, 100);
    REQUIRE(due.size() == 9);
    CHECK(due.back().rcpts[0].ta_id == ta_id(4));
    CHECK(due.back().rcpts[0].attempts == 3);
}

TEST_CASE("defedb: concurrent writers retry deadlocks") {
    TempDir d;
    Defedb db;
    REQUIRE(open_ok(db, d));
    std::vector<std::thread> threads;
    for (unsigned t = 0; t < 4; ++t) {
        threads.emplace_back([&db, t] {
            for (unsigned i = 0; i < 50; ++i) {
                auto e = envelope(ta_id(t * 1000 + i), 3);
                db.put_many({DeferredTa{e, {rcpt(e.ta_id, 0, T - i), rcpt(e.ta_id, 1, T + i)}}});
                db.due(T, 5, T + 1);
                if (i % 2) db.remove(e.ta_id, 0);
            }
        });
    }
    for (auto& th : threads) th.join();
    CHECK(db.count() == 4 * (100 - 25));
    std::size_t n = 0;
    db.for_each([&](const DeferredTa& ta) { n += ta.rcpts.size(); });
    CHECK(n == db.count());
}

TEST_CASE("defedb: a corrupt database is a clear error") {
    TempDir d;
    {
        Defedb db;
        REQUIRE(open_ok(db, d));
        auto e = envelope(ta_id(1), 1);
        db.put_deferred(e, rcpt(e.ta_id, 0, T));
    }
    {
        std::ofstream f(d.db() + "/rcpts.db", std::ios::binary | std::ios::trunc);
        f << std::string(8192, 'x');
    }
    Defedb db;
    std::string err;
    CHECK_FALSE(db.open(d.db(), d.quarantine(), err));
    std::printf("defedb: corrupt rcpts.db: %s\n", err.c_str());
    CHECK(err.find(d.db()) != std::string::npos);
}

TEST_CASE("defedb: 100,000 deferred recipients: fast reopen, first due batch in order") {
    TempDir d;
    constexpr unsigned n_ta = 50'000;  // two recipients each
    std::vector<std::uint64_t> all_times;
    {
        Defedb db;
        REQUIRE(open_ok(db, d));
        auto t0 = std::chrono::steady_clock::now();
        std::vector<DeferredTa> batch;
        all_times.reserve(2 * n_ta);
        for (unsigned i = 0; i < n_ta; ++i) {
            auto e = envelope(ta_id(i), 2);
            // Next tries spread over a day, in no relation to the ta-id order.
            std::uint64_t a = T + (i * 7919ull % 86'400) * 1'000'000;
            std::uint64_t b = T + (i * 104'729ull % 86'400) * 1'000'000;
            batch.push_back(DeferredTa{e, {rcpt(e.ta_id, 0, a), rcpt(e.ta_id, 1, b)}});
            all_times.push_back(a);
            all_times.push_back(b);
            if (batch.size() == 1000) {
                db.put_many(batch);
                batch.clear();
            }
        }
        CHECK(db.count() == 2 * n_ta);
        db.checkpoint();
        db.checkpoint();  // the second one lets the log files of the first go
        int logs = 0;
        for (const auto& e : fs::directory_iterator(d.db()))
            logs += e.path().filename().string().rfind("log.", 0) == 0;
        CHECK(logs == 1);
        auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
        std::printf("defedb: stored %u recipients in %lld ms (put_many of 1000)\n", 2 * n_ta,
                    static_cast<long long>(ms.count()));
    }
    auto t0 = std::chrono::steady_clock::now();
    Defedb db;
    REQUIRE(open_ok(db, d));
    auto t1 = std::chrono::steady_clock::now();
    auto next = db.next_due_time();
    auto due = db.due(T + 43'200'000'000ull, 100);
    auto t2 = std::chrono::steady_clock::now();
    auto us = [](auto a, auto b) {
        return static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(b - a).count());
    };
    CHECK(db.count() == 2 * n_ta);
    auto t3 = std::chrono::steady_clock::now();
    std::printf("defedb: %u recipients: open %lld us, next_due_time + due(now, 100) %lld us, "
                "first count() %lld us\n", 2 * n_ta, us(t0, t1), us(t1, t2), us(t2, t3));
    CHECK(next == T);
    std::vector<std::uint64_t> times;
    std::size_t n = 0;
    for (const auto& ta : due) {
        CHECK(ta.envelope.rcpts.size() == 2);
        for (const auto& r : ta.rcpts) {
            times.push_back(r.next_try_us);
            ++n;
        }
    }
    CHECK(n == 100);
    // Grouped by transaction in order of first due recipient; the recipients
    // alone come in time order, so their first-of-group times rise.
    std::vector<std::uint64_t> firsts;
    for (const auto& ta : due) firsts.push_back(ta.rcpts.front().next_try_us);
    CHECK(std::is_sorted(firsts.begin(), firsts.end()));
    std::sort(times.begin(), times.end());
    std::sort(all_times.begin(), all_times.end());
    all_times.resize(100);
    CHECK(times == all_times);  // exactly the 100 earliest
}

TEST_CASE("defedb: a version 1 recipient record (last error as text) still decodes") {
    namespace rec = smx::qmgr::defedb;
    auto be = [](std::string& s, std::uint64_t v, int bytes) {
        for (int i = bytes - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    };
    auto v1 = [&](const std::string& last_error) {
        std::string s{'\x01', '\x02'};  // version 1, warned
        be(s, T + 60, 8);               // next try
        be(s, 3, 4);                    // attempts
        be(s, T - 600, 8);              // first arrival
        be(s, T - 60, 8);               // last attempt
        for (const std::string& f : {std::string("rcpt@example.net"), last_error}) {
            be(s, f.size(), 4);
            s += f;
        }
        return s;
    };
    const std::string key = rec::rcpt_key(ta_id(7), 2);
    auto r = rec::decode_rcpt(key, v1("451 4.3.0 try again later"));
    REQUIRE(r);
    CHECK(r->ta_id == ta_id(7));
    CHECK(r->idx == 2);
    CHECK(r->addr == "rcpt@example.net");
    CHECK(r->attempts == 3);
    CHECK(r->warned);
    CHECK_FALSE(r->held);
    CHECK(r->next_try_us == T + 60);
    CHECK(r->first_arrival_us == T - 600);
    CHECK(r->last_attempt_us == T - 60);
    CHECK(r->last_reply == smx::msg::Reply{451, "4.3.0", "try again later"});
    CHECK(r->last_relay.empty());  // version 1 did not keep it
    // A reason of our own had no code; a reply without an enhanced status
    // keeps its whole text.
    CHECK(rec::decode_rcpt(key, v1("4.3.0 no DSN"))->last_reply == smx::msg::Reply{0, "4.3.0", "no DSN"});
    CHECK(rec::decode_rcpt(key, v1("no route to example.net"))->last_reply ==
          smx::msg::Reply{0, "", "no route to example.net"});
    CHECK(rec::decode_rcpt(key, v1("554 5.0.0x"))->last_reply == smx::msg::Reply{554, "", "5.0.0x"});
    // Written back, it is a current record with the same content.
    const std::string v2 = rec::encode_rcpt(*r);
    CHECK(static_cast<unsigned char>(v2[0]) == rec::format_version);
    CHECK(rec::decode_rcpt(key, v2) == r);
    // Truncated or with an unknown version: not ours.
    CHECK_FALSE(rec::decode_rcpt(key, v1("x").substr(0, 40)));
    std::string v9 = v1("x");
    v9[0] = 9;
    CHECK_FALSE(rec::decode_rcpt(key, v9));
}
