// Content segments: references are checked strictly, a record reads back
// only whole, for its own transaction and (verified) with its CRC.
#include "libsm/content_segment.hpp"

#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace smx::content;

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

// Everything here was written by this process, as SMTPS and QMGR both.
Store store_of(const Dir& d) { return Store{d.p.string(), true, {::geteuid(), ::geteuid()}}; }

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
    CHECK(smx::ta_id_time_us("6B05B3564B3F00001") == 0x6B05B356ull * 1000000 + 0x4B3F0);
}

TEST_CASE("a segment record reads back whole, for its transaction and of its envelope's size") {
    Dir d;
    const Store st = store_of(d);
    const std::string seg = smx::new_ta_id(), ta1 = smx::new_ta_id(), ta2 = smx::new_ta_id();
    const int fd = open_segment(d, seg);
    REQUIRE(fd >= 0);
    const std::string m1 = "Subject: one\r\n\r\nbody\r\n", m2(100000, 'x');
    REQUIRE(write_segment_record(fd, 0, ta1, m1) == 0);
    const std::uint64_t off2 = segment_header_size + m1.size();
    REQUIRE(write_segment_record(fd, off2, ta2, m2) == 0);
    CHECK(write_segment_record(fd, 0, "not-an-id", m1) == EINVAL);

    Body b;
    REQUIRE(b.open(st, segment_ref(seg, 0), ta1, m1.size(), nullptr, true) == 0);
    CHECK(b.size() == m1.size());
    std::string buf;
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m1);
    REQUIRE(b.read_at(9, 3, buf) == 0);
    CHECK(buf == "one");
    REQUIRE(b.open(st, segment_ref(seg, off2), ta2, m2.size(), nullptr, true) == 0);
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m2);

    // Another transaction's record, another size than the envelope's, a
    // place that is no record, a segment that is not there.
    CHECK(b.open(st, segment_ref(seg, 0), ta2, m1.size()) == EBADMSG);
    CHECK(b.why() == "the record of another transaction");
    CHECK(b.open(st, segment_ref(seg, 0), ta1, m1.size() + 1) == EBADMSG);
    CHECK(b.open(st, segment_ref(seg, 0), ta1, m1.size() - 1) == EBADMSG);
    CHECK(b.open(st, segment_ref(seg, 1), ta1, m1.size()) == EBADMSG);
    CHECK(b.open(st, segment_ref(seg, off2 + 1000000), ta2, m2.size()) == EBADMSG);
    CHECK(b.open(st, segment_ref(smx::new_ta_id(), 0), ta1, m1.size()) == ENOENT);
    CHECK(b.size() == 0);

    // Cut short (a power cut before the data was on disk): not whole,
    // whether the cut is past the first read of a large record or in it.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 50000)) == 0);
    CHECK(b.open(st, segment_ref(seg, off2), ta2, m2.size()) == EBADMSG);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 10)) == 0);
    CHECK(b.open(st, segment_ref(seg, off2), ta2, m2.size()) == EBADMSG);
    // Whole in length but not the bytes written: the CRC says so.
    REQUIRE(::pwrite(fd, "X", 1, static_cast<off_t>(segment_header_size + 2)) == 1);
    CHECK(b.open(st, segment_ref(seg, 0), ta1, m1.size(), nullptr, false) == 0);
    CHECK(b.open(st, segment_ref(seg, 0), ta1, m1.size(), nullptr, true) == EBADMSG);
    CHECK(b.why() == "the record's data does not match its CRC");
    // A small record one byte short.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(segment_header_size + m1.size() - 1)) == 0);
    CHECK(b.open(st, segment_ref(seg, 0), ta1, m1.size()) == EBADMSG);
    ::close(fd);
}

TEST_CASE("a record's size is believed only where it is the envelope's: a lie costs nothing") {
    Dir d;
    const Store st = store_of(d);
    const std::string seg = smx::new_ta_id(), ta = smx::new_ta_id();
    const int fd = open_segment(d, seg);
    REQUIRE(fd >= 0);
    const std::string m(3000, 'a');
    REQUIRE(write_segment_record(fd, 0, ta, m) == 0);
    // The writer's account rewrites the header's size to 2^40 and makes the
    // segment as large, sparse (over the segment limit: refused by its size).
    const std::uint64_t huge = std::uint64_t{1} << 40;
    char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((huge >> (8 * i)) & 0xff);
    REQUIRE(::pwrite(fd, le, 8, 8) == 8);
    Body b;
    CHECK(b.open(st, segment_ref(seg, 0), ta, m.size(), nullptr, true) == EBADMSG);
    CHECK(b.why() == "a record of 1099511627776 bytes, 3000 expected");
    // Claimed by the envelope too: over what a segment record can be.
    CHECK(b.open(st, segment_ref(seg, 0), ta, huge, nullptr, true) == EBADMSG);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(huge + 4096)) == 0);
    CHECK(b.open(st, segment_ref(seg, 0), ta, m.size(), nullptr, true) == EBADMSG);
    // A record within the limit whose envelope agrees, but the segment is
    // over the limit: refused before a byte is read.
    for (int i = 0; i < 8; ++i) le[i] = static_cast<char>((m.size() >> (8 * i)) & 0xff);
    REQUIRE(::pwrite(fd, le, 8, 8) == 8);
    CHECK(b.open(st, segment_ref(seg, 0), ta, m.size(), nullptr, true) == EBADMSG);
    CHECK(b.why().find("bytes, at most") != std::string::npos);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(segment_header_size + m.size())) == 0);
    CHECK(b.open(st, segment_ref(seg, 0), ta, m.size(), nullptr, true) == 0);
    ::close(fd);
}

TEST_CASE("a segment that is a link, a FIFO or another's file is not read") {
    Dir d;
    const Store st = store_of(d);
    const std::string real = smx::new_ta_id(), ta = smx::new_ta_id(), msg = "data\r\n";
    const int fd = open_segment(d, real);
    REQUIRE(fd >= 0);
    REQUIRE(write_segment_record(fd, 0, ta, msg) == 0);
    ::close(fd);
    const std::string link = smx::new_ta_id(), fifo = smx::new_ta_id();
    fs::create_symlink(segment_path(d.p.string(), real), segment_path(d.p.string(), link));
    REQUIRE(::mkfifo(segment_path(d.p.string(), fifo).c_str(), 0600) == 0);
    Body b;
    CHECK(b.open(st, segment_ref(link, 0), ta, msg.size()) == ELOOP);
    CHECK(b.open(st, segment_ref(fifo, 0), ta, msg.size()) == EBADMSG);
    CHECK(b.why() == "a FIFO");
    // Only SMTPS makes segments: a file of QMGR's account is not one.
    const Store other{d.p.string(), true, {::geteuid() + 1, ::geteuid()}};
    CHECK(b.open(other, segment_ref(real, 0), ta, msg.size()) == EBADMSG);
    SegmentFds fds(other);
    int err = 0;
    std::string why;
    CHECK(!fds.get(real, err, why));
    CHECK(err == EBADMSG);
    CHECK(b.open(st, segment_ref(real, 0), ta, msg.size()) == 0);
}

TEST_CASE("a small record is read in one go; a large one in pieces") {
    Dir d;
    const Store st = store_of(d);
    const std::string seg = smx::new_ta_id(), ta1 = smx::new_ta_id(), ta2 = smx::new_ta_id();
    const int fd = open_segment(d, seg);
    REQUIRE(fd >= 0);
    const std::string m1(3000, 'a'), m2(40000, 'b');
    REQUIRE(write_segment_record(fd, 0, ta1, m1) == 0);
    const std::uint64_t off2 = segment_header_size + m1.size();
    REQUIRE(write_segment_record(fd, off2, ta2, m2) == 0);
    Body b;
    REQUIRE(b.open(st, segment_ref(seg, 0), ta1, m1.size()) == 0);
    std::string buf;
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m1);
    REQUIRE(b.read_at(2990, 100, buf) == 0);
    CHECK(buf == std::string(10, 'a'));
    REQUIRE(b.open(st, segment_ref(seg, off2), ta2, m2.size(), nullptr, true) == 0);
    REQUIRE(b.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == m2);
    // Cut inside the record: not whole.
    REQUIRE(::ftruncate(fd, static_cast<off_t>(off2 + segment_header_size + 100)) == 0);
    CHECK(b.open(st, segment_ref(seg, off2), ta2, m2.size()) == EBADMSG);
    ::close(fd);
}

TEST_CASE("a content file's body is the whole file, of the envelope's size") {
    Dir d;
    const Store st = store_of(d);
    const std::string id = smx::new_ta_id();
    REQUIRE(write_durable(smx::content::file_path(d.p.string(), id, true), "hello\r\n") == 0);
    Body b;
    REQUIRE(b.open(st, id, id, 7) == 0);
    CHECK(b.size() == 7);
    std::string buf;
    REQUIRE(b.read_at(0, 100, buf) == 0);
    CHECK(buf == "hello\r\n");
    CHECK(b.open(st, id, id, 8) == EBADMSG);
    CHECK(b.why() == "7 bytes, 8 expected");
    CHECK(b.open(st, "bad/../id", id, 7) == EINVAL);
    CHECK(b.open(st, smx::new_ta_id(), id, 7) == ENOENT);
}

TEST_CASE("open segments: one descriptor per segment, the oldest go first, a reader keeps its own") {
    Dir d;
    const Store st = store_of(d);
    // Ids made a second apart, oldest first (an id starts with its time).
    const std::uint64_t t0 = smx::now_us();
    auto id_at = [](std::uint64_t us) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%08llX%05llX%04X",
                      static_cast<unsigned long long>(us / 1000000),
                      static_cast<unsigned long long>(us % 1000000), 1u);
        return std::string(buf);
    };
    const std::string a = id_at(t0 - 3000000), b = id_at(t0 - 2000000), c = id_at(t0 - 1000000);
    const std::string ta = smx::new_ta_id(), msg = "Subject: kept\r\n\r\nbody\r\n";
    for (const auto& seg : {a, b, c}) {
        const int fd = open_segment(d, seg);
        REQUIRE(fd >= 0);
        REQUIRE(write_segment_record(fd, 0, ta, msg) == 0);
        ::close(fd);
    }
    SegmentFds fds(st, 2);
    int err = -1;
    std::string why;
    const auto fa = fds.get(a, err, why);
    REQUIRE(fa);
    CHECK(err == 0);
    CHECK(fds.get(a, err, why) == fa);  // opened once
    CHECK(!fds.get(smx::new_ta_id(), err, why));
    CHECK(err == ENOENT);
    CHECK(fds.open_count() == 1);

    // A body read through the set keeps its segment open: evicted (max 2,
    // the oldest first) and unlinked, it still reads.
    Body body;
    REQUIRE(body.open(st, segment_ref(a, 0), ta, msg.size(), &fds, true) == 0);
    REQUIRE(fds.get(b, err, why));
    REQUIRE(fds.get(c, err, why));
    CHECK(fds.open_count() == 2);
    REQUIRE(::unlink(segment_path(d.p.string(), a).c_str()) == 0);
    std::string buf;
    REQUIRE(body.read_at(0, 1 << 20, buf) == 0);
    CHECK(buf == msg);
    // a was evicted: asked again it is gone.
    CHECK(!fds.get(a, err, why));
    CHECK(err == ENOENT);

    fds.close_before(smx::ta_id_time_us(c));
    CHECK(fds.open_count() == 1);
    fds.close_before(UINT64_MAX);
    CHECK(fds.open_count() == 0);
}
