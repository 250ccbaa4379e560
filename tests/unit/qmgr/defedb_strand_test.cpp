// The DEFEDB strand on its own (defedb_strand.hpp), over a real DEFEDB: calls
// run on the pool, never on the event loop, one at a time and in the order
// QMGR made them; a DefedbError comes back as nullopt, not as an exception.
#include "tests/unit/qmgr/spool.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

using namespace parts_test;

namespace {

// One caller: awaits work on the strand and keeps what came back.
template <class T>
asio::awaitable<void> call(DefedbStrand& strand, std::function<T(Defedb&)> work,
                           std::optional<std::optional<T>>& out) {
    out = co_await strand.run(std::move(work));
}

template <class T>
void spawn(Spool& s, DefedbStrand& strand, std::function<T(Defedb&)> work,
           std::optional<std::optional<T>>& out) {
    asio::co_spawn(s.io, call(strand, std::move(work), out), smx::crash_on_exception("strand test"));
}

} // namespace

TEST_CASE("defedb strand: calls run on the pool in the order made, one at a time",
          "[defedb_strand]") {
    Spool s;
    asio::thread_pool pool(4);  // room to overlap, were the strand no strand
    DefedbStrand strand(pool, s.defedb);
    const auto loop = std::this_thread::get_id();  // run_until runs the loop here
    std::mutex m;
    std::vector<int> order;
    std::atomic<int> inside{0};
    std::atomic<bool> overlapped{false}, on_loop{false};
    constexpr int n = 20;
    std::vector<std::optional<std::optional<int>>> got(n);
    for (int i = 0; i < n; ++i)
        spawn<int>(s, strand,
                   [&, i](Defedb&) {
                       if (++inside > 1) overlapped = true;
                       if (std::this_thread::get_id() == loop) on_loop = true;
                       std::this_thread::sleep_for(200us);  // a window for another call
                       {
                           std::lock_guard lock(m);
                           order.push_back(i);
                       }
                       --inside;
                       return i * 10;
                   },
                   got[i]);
    REQUIRE(s.run_until([&] {
        return std::all_of(got.begin(), got.end(), [](const auto& g) { return g.has_value(); });
    }));
    std::vector<int> made(n);
    for (int i = 0; i < n; ++i) {
        made[i] = i;
        CHECK(*got[i] == std::optional<int>(i * 10));
    }
    CHECK(order == made);
    CHECK_FALSE(overlapped);
    CHECK_FALSE(on_loop);
    pool.join();
}

TEST_CASE("defedb strand: a presence check sees every removal made before it", "[defedb_strand]") {
    Spool s;
    asio::thread_pool pool(2);
    DefedbStrand strand(pool, s.defedb);
    smx::msg::TaCommit e;
    e.ta_id = e.content_id = smx::new_ta_id();
    e.sender = "s@example.org";
    e.rcpts = {{"a@example.net", ""}, {"b@example.net", ""}};
    s.park(e);
    // Made in this order on the loop: a check, the removal, a check.
    std::optional<std::optional<bool>> before, after;
    std::optional<std::optional<std::size_t>> removed;
    const std::string id = e.ta_id;
    spawn<bool>(s, strand, [id](Defedb& db) { return db.has_ta(id); }, before);
    spawn<std::size_t>(s, strand, [id](Defedb& db) { return db.remove_ta(id); }, removed);
    spawn<bool>(s, strand, [id](Defedb& db) { return db.has_ta(id); }, after);
    REQUIRE(s.run_until([&] { return before && removed && after; }));
    CHECK(**before == true);
    CHECK(**removed == 2);
    CHECK(**after == false);
    pool.join();
}

TEST_CASE("defedb strand: a DefedbError is nullopt for its caller, and the next call runs",
          "[defedb_strand]") {
    Spool s;
    asio::thread_pool pool(2);
    DefedbStrand strand(pool, s.defedb);
    std::optional<std::optional<int>> failed, next;
    spawn<int>(s, strand,
               [](Defedb&) -> int { throw DefedbError("test: no space left on device", false); },
               failed);
    spawn<int>(s, strand, [](Defedb& db) { return static_cast<int>(db.count()); }, next);
    // An exception out of the strand would reach crash_on_exception: a panic.
    REQUIRE(s.run_until([&] { return failed && next; }));
    CHECK_FALSE(failed->has_value());
    CHECK(*next == std::optional<int>(0));
    pool.join();
}
