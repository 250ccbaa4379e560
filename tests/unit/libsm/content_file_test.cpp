// Content files: durable writes appear whole under their final name or not
// at all.
#include "libsm/content_file.hpp"

#include "libsm/ids.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
}

} // namespace

TEST_CASE("content files: durable write, tmp then rename, nothing left on failure") {
    const fs::path dir = fs::temp_directory_path() / ("smx-content-" + smx::new_ta_id());
    const std::string big(3 << 20, 'm');
    const fs::path path = dir / "a" / "b" / "FILE";  // parents made on first use
    REQUIRE(smx::content::write_durable(path.string(), big) == 0);
    CHECK(slurp(path) == big);
    CHECK_FALSE(fs::exists(path.string() + ".tmp"));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0707) == 0600);  // group read unless the umask takes it
    REQUIRE(smx::content::write_durable((dir / "private").string(), "x", 0600) == 0);
    REQUIRE(::stat((dir / "private").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    // A crashed writer's .tmp is replaced by a new file.
    std::ofstream(dir / "again.tmp") << "stale and longer";
    REQUIRE(smx::content::write_durable((dir / "again").string(), "new") == 0);
    CHECK(slurp(dir / "again") == "new");
    CHECK_FALSE(fs::exists(dir / "again.tmp"));

    // A .tmp that is a link (another account may put one in a content
    // directory) is never written through: what it points to is untouched.
    std::ofstream(dir / "victim") << "the envelope log";
    fs::create_symlink(dir / "victim", dir / "linked.tmp");
    REQUIRE(smx::content::write_durable((dir / "linked").string(), "mine") == 0);
    CHECK(slurp(dir / "victim") == "the envelope log");
    CHECK(slurp(dir / "linked") == "mine");
    CHECK_FALSE(fs::is_symlink(dir / "linked"));

    // A parent that is a file: an error value, no file.
    std::ofstream(dir / "plain") << "x";
    CHECK(smx::content::write_durable((dir / "plain" / "d").string(), "data") == ENOTDIR);
    CHECK(smx::content::write_all(-1, "x") == EBADF);
    fs::remove_all(dir);
}

TEST_CASE("content files: created under the final name, removed on failure, never reused") {
    const fs::path dir = fs::temp_directory_path() / ("smx-content-" + smx::new_ta_id());
    const std::string path = (dir / "x" / "C").string();  // parents made on first use
    int fd = -1;
    REQUIRE(smx::content::create(path, fd) == 0);
    REQUIRE(smx::content::write_all(fd, "whole") == 0);
    CHECK(smx::content::close_created(fd, 0, path, false) == 0);
    CHECK(slurp(path) == "whole");
    CHECK(fs::directory_iterator(dir / "x")->path() == fs::path(path));  // nothing beside it

    // The name is taken: EEXIST, and the error path leaves the file alone.
    int again = -1;
    CHECK(smx::content::create(path, again) == EEXIST);
    CHECK(again < 0);
    CHECK(smx::content::close_created(again, EEXIST, path) == EEXIST);
    CHECK(slurp(path) == "whole");

    // A write that failed on the way: the file goes.
    const std::string failed = (dir / "x" / "D").string();
    REQUIRE(smx::content::create(failed, fd) == 0);
    REQUIRE(smx::content::write_all(fd, "partial") == 0);
    CHECK(smx::content::close_created(fd, EIO, failed) == EIO);
    CHECK_FALSE(fs::exists(failed));
    fs::remove_all(dir);
}

TEST_CASE("content files: a parent that is a file") {
    const fs::path dir = fs::temp_directory_path() / ("smx-content-" + smx::new_ta_id());
    fs::create_directories(dir);
    std::ofstream(dir / "plain") << "x";
    int fd = -1;
    CHECK(smx::content::create((dir / "plain" / "d").string(), fd) == ENOTDIR);
    fs::remove_all(dir);
}

TEST_CASE("content files: open, remove and list by id; bad ids refused") {
    const fs::path spool = fs::temp_directory_path() / ("smx-content-" + smx::new_ta_id());
    const auto later = std::chrono::system_clock::now() + std::chrono::hours(1);
    const smx::content::Expect seven = smx::content::message_file(smx::content::writers_from_env(), 7);
    for (const bool hashed : {false, true}) {
        const std::string dir = (spool / (hashed ? "hashed" : "flat") / "cdb").string();
        std::vector<std::string> ids;
        // A content directory not made yet holds no content files.
        CHECK(smx::content::list(dir, later, ids) == 0);
        CHECK(ids.empty());

        const std::string id = smx::new_ta_id();
        const std::string path = smx::content::file_path(dir, id, hashed);
        REQUIRE(smx::content::write_durable(path, "message") == 0);

        int fd = -1;
        std::uint64_t size = 0;
        std::string why;
        REQUIRE(smx::content::open_read(dir, id, hashed, seven, fd, size, why) == 0);
        CHECK(size == 7);
        char buf[16] = {};
        CHECK(::read(fd, buf, sizeof buf) == 7);
        CHECK(std::string(buf) == "message");
        ::close(fd);

        // Ids become file names: nothing that is not one is opened or removed.
        for (const std::string& bad : std::vector<std::string>{
                 "", "../../etc/passwd", "0123456789abcdef0", id + ".tmp", id.substr(1),
                 "/" + id.substr(1)}) {
            CHECK(smx::content::open_read(dir, bad, hashed, seven, fd, size, why) == EINVAL);
            CHECK(fd == -1);
            CHECK(smx::content::remove(dir, bad, hashed) == EINVAL);
        }

        // Foreign files beside it: a .tmp (not durable yet), a name that is
        // not an id, a directory named like an id, a file beside the content
        // directory. A link named like an id is listed (by its own time): the
        // sweep removes what is no file.
        const fs::path file_dir = fs::path(path).parent_path();
        std::ofstream(file_dir / (smx::new_ta_id() + ".tmp")) << "x";
        std::ofstream(file_dir / "README") << "x";
        fs::create_directories(file_dir / smx::new_ta_id());
        std::ofstream(fs::path(dir).parent_path() / smx::new_ta_id()) << "x";
        const std::string link = smx::new_ta_id();
        fs::create_symlink("/nonexistent", file_dir / link);
        REQUIRE(smx::content::list(dir, later, ids) == 0);
        std::sort(ids.begin(), ids.end());
        CHECK(ids == std::vector<std::string>{id, link});
        fs::remove(file_dir / link);
        ids.clear();

        // The cutoff: a file written after it is not old.
        ids.clear();
        REQUIRE(smx::content::list(dir, std::chrono::system_clock::time_point::min(), ids) == 0);
        CHECK(ids.empty());

        CHECK(smx::content::remove(dir, id, hashed) == 0);
        CHECK_FALSE(fs::exists(path));
        CHECK(smx::content::remove(dir, id, hashed) == ENOENT);
        CHECK(smx::content::open_read(dir, id, hashed, seven, fd, size, why) == ENOENT);
    }
    // A content directory that is a file cannot be listed: an error value,
    // not a crash.
    const std::string odd = (spool / "odd").string();
    std::ofstream(odd) << "x";
    std::vector<std::string> ids;
    CHECK(smx::content::list(odd, std::chrono::system_clock::now() + std::chrono::hours(1), ids) ==
          ENOTDIR);
    fs::remove_all(spool);
}

TEST_CASE("content files: the rename made durable too, and which directories share a file system") {
    const fs::path dir = fs::temp_directory_path() / ("smx-content-" + smx::new_ta_id());
    const std::string path = (dir / "XX" / "FILE").string();
    REQUIRE(smx::content::write_durable(path, "named", smx::content::file_mode, true) == 0);
    CHECK(slurp(path) == "named");
    CHECK(smx::content::sync_dir(dir.string()) == 0);
    CHECK(smx::content::sync_dir((dir / "none").string()) == ENOENT);
    CHECK(smx::content::same_file_system(dir.string(), path));
    CHECK_FALSE(smx::content::same_file_system(dir.string(), (dir / "none").string()));
    // /proc is never the temporary directory's file system.
    CHECK_FALSE(smx::content::same_file_system(dir.string(), "/proc"));

    // sync_names: only content_sync = "file" with the IBDB elsewhere.
    smx::Config cfg;
    cfg.queue.spool_dir = dir.string();
    fs::create_directories(cfg.content_dir_abs());
    fs::create_directories(cfg.ibdb_dir_abs());
    CHECK_FALSE(smx::content::sync_names(cfg));  // batch
    cfg.queue.content_sync = smx::QueueConfig::ContentSync::file;
    CHECK_FALSE(smx::content::sync_names(cfg));  // one file system
    cfg.queue.ibdb_dir = "/proc";               // stands in for another one
    CHECK(smx::content::sync_names(cfg));
    cfg.queue.test_no_sync = true;
    CHECK_FALSE(smx::content::sync_names(cfg));
    fs::remove_all(dir);
}
