// QMGR's disk: the emergency reserve file is made, kept and made again;
// TA_COMMIT must leave min_free_space free, a segment's message twice.
#include "tests/unit/qmgr/harness.hpp"

#include "qmgr/disk_space.hpp"

#include <sys/statvfs.h>

using namespace qmgr_test;

namespace {

std::uint64_t free_bytes(const std::string& dir) {
    struct statvfs vfs;
    REQUIRE(::statvfs(dir.c_str(), &vfs) == 0);
    return static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
}

std::string reserve_of(const smx::Config& cfg) {
    return cfg.defedb_dir_abs() + "/" + reserve_file_name;
}

} // namespace

TEST_CASE("disk space: the emergency reserve is made, and made again when it is gone") {
    Harness h;  // its QMGR made the file at start
    const std::string reserve = reserve_of(h.cfg);
    REQUIRE(fs::is_regular_file(reserve));
    CHECK(fs::file_size(reserve) == reserve_file_size);
    // Given back only where less than its size is free: not here.
    DiskSpace::give_back_if_short(h.cfg);
    CHECK(fs::exists(reserve));
    fs::remove(reserve);
    DiskSpace space(h.cfg);
    CHECK(fs::file_size(reserve) == reserve_file_size);
    fs::remove(reserve);
    const auto fullest = space.watch();
    REQUIRE(fullest);
    CHECK_FALSE(fullest->short_of_space);  // min_free_space = 0
    CHECK(fs::file_size(reserve) == reserve_file_size);
    CHECK_FALSE(fs::exists(reserve + ".tmp"));
}

TEST_CASE("disk space: TA_COMMIT must leave min_free_space, with a segment's copy") {
    Harness h;
    h.stop();
    const std::uint64_t free = free_bytes(h.cfg.spool_dir_abs());
    REQUIRE(free > (64u << 20));
    // Half the free space as the reserve; the margins are sixths of it, far
    // more than anything else on this machine writes meanwhile.
    h.cfg.queue.min_free_space = free / 2;
    fs::create_directories(h.cfg.content_dir_abs());  // smx run makes it
    DiskSpace space(h.cfg);
    smx::msg::TaCommit env;
    env.ta_id = smx::new_ta_id();
    env.content_id = env.ta_id;
    env.size = free / 3;
    CHECK(space.admit(env).empty());
    CHECK(space.admit(env).empty());  // a content file: nothing more to come
    // In a segment its deferral copy is counted: a third of the free space
    // fits once, not twice, until the segments are listed again.
    env.content_id = smx::content::segment_ref(env.ta_id, 0);
    CHECK(space.admit(env).empty());
    CHECK(space.admit(env) == h.cfg.content_dir_abs());
    space.watch();  // no segment is there
    CHECK(space.admit(env).empty());

    h.cfg.queue.min_free_space = free * 2;
    h.start();
    h.commit({"r@example.net"});
    REQUIRE(h.acks.size() == 1);
    CHECK(h.acks[0].status == smx::msg::AckStatus::tempfail);
    CHECK(h.acks[0].text == "4.3.1 Insufficient system storage");
    CHECK(h.stat("commit_tempfailed") == 1);
}
