// Content segments: references are checked strictly, a record reads back
// only whole, for its own transaction and (verified) with its CRC.
#include "content_segment.hpp"

#include "content_file.hpp"
#include "ids.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace sm::content;

namespace {

struct Dir {
    fs::path p = fs::temp_directory_path() / ("segment-test-" + std::to_string(::getpid()));
    Dir() {
        fs::remove_all(p);
        fs::create_directories(p / "segments");
    }
    ~Dir() { fs::remove_all(p); }
};

int open_segment(const Dir& d, const std::string& seg) {
    return ::open(segment_path(d.p.string(), seg).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
}

} // namespace

TEST_CASE("segment references: one spelling, checked strictly") {
    const std::string seg = "6B05B3564B3F00001";
    CHECK(segment_ref(seg, 0) == seg + "+0");
    CHECK(segment_ref(seg, 0x1A2B) == seg + "+1A2B");
    auto r = parse_segment_ref(seg + "+1A2B");
    REQUIRE(r);
    CHECK(r->segment == seg);
    CHECK(r->offset == 0x1A2B);
    CHECK_FALSE(parse_segment_ref(seg));  // a content file's id
    for (const char* bad : {"+0", "6B05B3564B3F00001+", "6B05B3564B3F00001+01",
                            "6B05B3564B3F00001+1a", "6B05B3564B3F00001+-1", "6B05B3564B3F0000+1",
                            "6B05B3564B3F00001+1+2", "6B05B3564B3F00001+1000000000000",
                            "../../etc/passwd+1", "6B05B3564B3F00001 +1"}) {
        INFO(bad);
        CHECK_FALSE(parse_segment_ref(bad));
        CHECK_FALSE(valid_content_id(bad));
    }
    CHECK(valid_content_id(seg));
    CHECK(valid_content_id(seg + "+FFFFFFFFFFFF"));
    CHECK(segment_of_file_name(seg + ".seg") == seg);
    CHECK(segment_of_file_name(seg) == "");
    CHECK(segment_of_file_name("x.seg") == "");
    CHECK(sm::ta_id_time_us("6B05B3564B3F00001") == 0x6B05B356ull * 1000000 + 0x4B3F0);
}

TEST_CASE("a segment record reads back whole, for its transaction") {
    Dir d;
    const std::string seg = sm::new_ta_id(), ta1 = sm::new_ta_id(), ta2 = sm::new_ta_id();
    const int fd = open_segment(d, seg);
    REQUIRE(fd >= 0);
    const std::string m1 = "Subject: one\r\n\r\nbody\r\n", m2(100000, 'x');
    REQUIRE(write_segment_record(fd, 0, ta1, m1) == 0);
    const std::uint64_t off2 = segment_header_size + m1.size();
    REQUIRE(write_segment_record(fd, off2, ta2, m2) == 0);
    CHECK(write_segment_record(fd, 0, "not-an-id", m1) == EINVAL);

    Body b;
    REQUIRE(b.open(d.p.string(), segment_ref(seg, 0), true, ta1, true) == 0);
    CHECK(b.size() == m1.size());
    std::string buf;
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m1);
    REQUIRE(b.read_at(9, 3, buf) == 0);
    CHECK(buf == "one");
    REQUIRE(b.open(d.p.string(), segment_ref(seg, off2), true, ta2, true) == 0);
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m2);

    // Another transaction's record, a place that is no record, a segment
    // that is not there.
    CHECK(b.open(d.p.string(), segment_ref(seg, 0), true, ta2) == EBADMSG);
    CHECK(b.open(d.p.string(), segment_ref(seg, 1), true) == EBADMSG);
    CHECK(b.open(d.p.string(), segment_ref(seg, off2 + 1000000), true) == EBADMSG);
    CHECK(b.open(d.p.string(), segment_ref(sm::new_ta_id(), 0), true) == ENOENT);

    // Cut short (a power cut before the data was on disk): not whole,
    // whether the cut is past the first read of a large record or in it.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 50000)) == 0);
    CHECK(b.open(d.p.string(), segment_ref(seg, off2), true, ta2) == EBADMSG);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 10)) == 0);
    CHECK(b.open(d.p.string(), segment_ref(seg, off2), true, ta2) == EBADMSG);
    // Whole in length but not the bytes written: the CRC says so.
    REQUIRE(::pwrite(fd, "X", 1, static_cast<off_t>(segment_header_size + 2)) == 1);
    CHECK(b.open(d.p.string(), segment_ref(seg, 0), true, ta1, false) == 0);
    CHECK(b.open(d.p.string(), segment_ref(seg, 0), true, ta1, true) == EBADMSG);
    // A small record one byte short.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(segment_header_size + m1.size() - 1)) == 0);
    CHECK(b.open(d.p.string(), segment_ref(seg, 0), true, ta1) == EBADMSG);
    ::close(fd);
}

TEST_CASE("a size hint reads a small record in one go, and a wrong one changes nothing") {
    Dir d;
    const std::string seg = sm::new_ta_id(), ta1 = sm::new_ta_id(), ta2 = sm::new_ta_id();
    const int fd = open_segment(d, seg);
    REQUIRE(fd >= 0);
    const std::string m1(3000, 'a'), m2(40000, 'b');
    REQUIRE(write_segment_record(fd, 0, ta1, m1) == 0);
    const std::uint64_t off2 = segment_header_size + m1.size();
    REQUIRE(write_segment_record(fd, off2, ta2, m2) == 0);
    for (std::uint64_t hint : {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{2999},
                               std::uint64_t{3000}, std::uint64_t{3001}, std::uint64_t{1} << 30}) {
        INFO(hint);
        Body b;
        REQUIRE(b.open(d.p.string(), segment_ref(seg, 0), true, ta1, false, nullptr, hint) == 0);
        std::string buf;
        REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
        CHECK(buf == m1);
        REQUIRE(b.read_at(2990, 100, buf) == 0);
        CHECK(buf == std::string(10, 'a'));
        REQUIRE(b.open(d.p.string(), segment_ref(seg, off2), true, ta2, true, nullptr, hint) == 0);
        REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
        CHECK(buf == m2);
    }
    // Cut inside the record: not whole, with or without the right hint.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 100)) == 0);
    Body b;
    CHECK(b.open(d.p.string(), segment_ref(seg, off2), true, ta2, false, nullptr, m2.size()) == EBADMSG);
    CHECK(b.open(d.p.string(), segment_ref(seg, off2), true, ta2, false, nullptr, 50) == EBADMSG);
    ::close(fd);
}

TEST_CASE("a content file's body is the whole file") {
    Dir d;
    const std::string id = sm::new_ta_id();
    REQUIRE(write_durable(sm::cdb_path(d.p.string(), id, true), "hello\r\n") == 0);
    Body b;
    REQUIRE(b.open(d.p.string(), id, true) == 0);
    CHECK(b.size() == 7);
    std::string buf;
    REQUIRE(b.read_at(0, 100, buf) == 0);
    CHECK(buf == "hello\r\n");
    CHECK(b.open(d.p.string(), "bad/../id", true) == EINVAL);
    CHECK(b.open(d.p.string(), sm::new_ta_id(), true) == ENOENT);
}

TEST_CASE("open segments: one descriptor per segment, the oldest go first, a reader keeps its own") {
    Dir d;
    // Ids made a second apart, oldest first (an id starts with its time).
    const std::uint64_t t0 = sm::now_us();
    auto id_at = [](std::uint64_t us) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%08llX%05llX%04X",
                      static_cast<unsigned long long>(us / 1000000),
                      static_cast<unsigned long long>(us % 1000000), 1u);
        return std::string(buf);
    };
    const std::string a = id_at(t0 - 3000000), b = id_at(t0 - 2000000), c = id_at(t0 - 1000000);
    const std::string ta = sm::new_ta_id(), msg = "Subject: kept\r\n\r\nbody\r\n";
    for (const auto& seg : {a, b, c}) {
        const int fd = open_segment(d, seg);
        REQUIRE(fd >= 0);
        REQUIRE(write_segment_record(fd, 0, ta, msg) == 0);
        ::close(fd);
    }
    SegmentFds fds(d.p.string(), 2);
    int err = -1;
    const auto fa = fds.get(a, err);
    REQUIRE(fa);
    CHECK(err == 0);
    CHECK(fds.get(a, err) == fa);  // opened once
    CHECK(!fds.get(sm::new_ta_id(), err));
    CHECK(err == ENOENT);
    CHECK(fds.open_count() == 1);

    // A body read through the set keeps its segment open: evicted (max 2,
    // the oldest first) and unlinked, it still reads.
    Body body;
    REQUIRE(body.open(d.p.string(), segment_ref(a, 0), true, ta, true, &fds) == 0);
    REQUIRE(fds.get(b, err));
    REQUIRE(fds.get(c, err));
    CHECK(fds.open_count() == 2);
    REQUIRE(::unlink(segment_path(d.p.string(), a).c_str()) == 0);
    std::string buf;
    REQUIRE(body.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == msg);
    // a was evicted: asked again it is gone.
    CHECK(!fds.get(a, err));
    CHECK(err == ENOENT);

    fds.close_before(sm::ta_id_time_us(c));
    CHECK(fds.open_count() == 1);
    fds.close_before(UINT64_MAX);
    CHECK(fds.open_count() == 0);
}
