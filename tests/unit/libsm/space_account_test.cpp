// The free-space account: a write and the copy it may need must leave the
// reserve; claims, segment copies and owed bytes count until they show up
// in what the gauges read, and never twice less than they should.
#include "libsm/space_account.hpp"

#include "libsm/content_segment.hpp"

#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace {

constexpr std::uint64_t MiB = 1 << 20;

// Gauges the test sets: free space and the segments' bytes.
struct Disk {
    std::optional<std::uint64_t> free = 100 * MiB;
    std::uint64_t segments = 0;
    std::function<void()> while_listing;  // runs inside the segments gauge
    smx::SpaceAccount::Gauges gauges() {
        return {[this] { return free; },
                [this] {
                    if (while_listing) while_listing();
                    return std::optional<std::uint64_t>(segments);
                }};
    }
};

} // namespace

TEST_CASE("space account: a write must leave the reserve") {
    Disk d;
    smx::SpaceAccount a(10 * MiB, d.gauges());
    CHECK(a.has_room(90 * MiB));
    CHECK_FALSE(a.has_room(90 * MiB + 1));
    // A message kept in a segment counts twice: the copy it needs when deferred.
    CHECK(a.has_room(45 * MiB, 45 * MiB));
    CHECK_FALSE(a.has_room(45 * MiB, 45 * MiB + 1));
    CHECK(a.room() == 100 * MiB);
    d.free = 10 * MiB;
    CHECK(a.has_room(0));
    d.free = 10 * MiB - 1;
    CHECK_FALSE(a.has_room(0));
    CHECK_FALSE(a.claim(0));
}

TEST_CASE("space account: reserve 0 and an unknown free space never refuse") {
    Disk d;
    d.free = 0;
    smx::SpaceAccount none(0, d.gauges());
    CHECK(none.has_room(UINT64_MAX / 2, UINT64_MAX / 2));
    auto c = none.claim(UINT64_MAX / 2);
    REQUIRE(c);
    d.free = std::nullopt;
    smx::SpaceAccount unknown(10 * MiB, d.gauges());
    CHECK(unknown.has_room(UINT64_MAX / 2));
    CHECK_FALSE(unknown.room());
}

TEST_CASE("space account: claims count until they end") {
    Disk d;
    smx::SpaceAccount a(10 * MiB, d.gauges());
    auto first = a.claim(50 * MiB);
    REQUIRE(first);
    // Each fits alone, not both: the first is not written yet.
    CHECK_FALSE(a.claim(50 * MiB));
    CHECK(a.room() == 50 * MiB);
    {
        auto moved = std::move(*first);
        CHECK(a.room() == 50 * MiB);  // moving a claim does not end it
    }
    CHECK(a.room() == 100 * MiB);
    // Written, the bytes are in the free space; a failed write frees them.
    {
        auto c = a.claim(30 * MiB);
        REQUIRE(c);
        d.free = 70 * MiB;
        c->written();
    }
    CHECK(a.room() == 70 * MiB);
    d.free = 100 * MiB;
    CHECK(a.claim(90 * MiB));
}

TEST_CASE("space account: a segment copy counts until the segments are listed again") {
    Disk d;
    smx::SpaceAccount a(10 * MiB, d.gauges());
    REQUIRE(a.recount_due());
    CHECK_FALSE(a.recount_due());  // one caller lists
    a.recount_segments();
    {
        auto c = a.claim(1 * MiB, 1 * MiB);
        REQUIRE(c);
        CHECK(a.room() == 98 * MiB);
        d.free = 99 * MiB;  // the record is on disk
        c->written();
    }
    // Its copy, not yet in any list: counted by the claim that wrote it.
    CHECK(a.room() == 98 * MiB);
    // The list finds it; a copy written while a list runs stays counted.
    d.segments = 1 * MiB;
    d.while_listing = [&] {
        auto c = a.claim(2 * MiB, 2 * MiB);
        REQUIRE(c);
        c->written();
    };
    a.recount_segments();
    d.while_listing = nullptr;
    CHECK(a.room() == 99 * MiB - 1 * MiB - 2 * MiB);
    // The next list has it (the segment's bytes; the free space the record).
    d.segments = 3 * MiB;
    d.free = 97 * MiB;
    a.recount_segments();
    CHECK(a.room() == 94 * MiB);
    // A failed write's copy is dropped with its claim.
    { auto c = a.claim(1 * MiB, 1 * MiB); }
    CHECK(a.room() == 94 * MiB);
}

TEST_CASE("space account: owed bytes count") {
    Disk d;
    smx::SpaceAccount a(10 * MiB, d.gauges());
    a.set_owed(4 * MiB);
    CHECK(a.room() == 96 * MiB);
    CHECK_FALSE(a.has_room(86 * MiB + 1));
    a.set_owed(0);
    CHECK(a.has_room(90 * MiB));
}

TEST_CASE("space account: measured on a real directory") {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("space-test-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    auto g = smx::SpaceAccount::measure(dir.string(), dir.string());
    CHECK_FALSE(g.free());  // not made yet: unknown
    CHECK(g.segments() == 0);
    fs::create_directories(smx::content::segments_dir(dir.string()));
    REQUIRE(g.free());
    CHECK(*g.free() > 0);
    const std::string seg = smx::content::segment_path(dir.string(), "6B05B3564B3F00001");
    std::ofstream(seg) << std::string(1000, 'x');
    // Other names, and what a link points to, are not segments' bytes.
    std::ofstream(smx::content::segments_dir(dir.string()) + "/other") << std::string(500, 'y');
    fs::create_symlink(seg, smx::content::segment_path(dir.string(), "6B05B3564B3F00002"));
    CHECK(g.segments() == 1000);
    CHECK(smx::SpaceAccount::measure(dir.string()).segments == nullptr);
    fs::remove_all(dir);
}
