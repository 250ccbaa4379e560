// The quarantine writer: the whole copy, 0600, or an error naming the path.
#include "qmgr/quarantine.hpp"

#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using smx::qmgr::quarantine_write;

TEST_CASE("quarantine_write writes the whole copy, private, and reports failures") {
    const fs::path dir = fs::temp_directory_path() / ("smx-quarantine-" + smx::new_ta_id());
    const std::string big(1 << 20, 'x');
    REQUIRE(quarantine_write((dir / "q").string(), "a.envelope", big).empty());  // creates q/
    std::ifstream in(dir / "q" / "a.envelope", std::ios::binary);
    std::stringstream got;
    got << in.rdbuf();
    CHECK(got.str() == big);
    struct stat st {};
    REQUIRE(::stat((dir / "q" / "a.envelope").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    // A directory that cannot be one (a file is in the way): an error, no copy.
    std::ofstream(dir / "file") << "x";
    const auto failures = smx::qmgr::quarantine_write_failures();
    const std::string err = quarantine_write((dir / "file").string(), "b", "data");
    CHECK(err.find((dir / "file" / "b").string()) == 0);
    CHECK_FALSE(fs::exists(dir / "file" / "b"));
    CHECK(smx::qmgr::quarantine_write_failures() == failures + 1);
    fs::remove_all(dir);
}

TEST_CASE("quarantine_move keeps a content file and removes what is none") {
    const fs::path dir = fs::temp_directory_path() / ("smx-quarantine-" + smx::new_ta_id());
    fs::create_directories(dir / "q");
    const uid_t me = ::geteuid();
    const smx::content::Expect upto{me, me, 100, false};
    std::string why;
    std::ofstream(dir / "msg") << "a message";
    CHECK(smx::qmgr::quarantine_move((dir / "msg").string(), (dir / "q").string(), "cdb-1", upto, why) == 0);
    CHECK(fs::file_size(dir / "q" / "cdb-1") == 9);
    CHECK_FALSE(fs::exists(dir / "msg"));
    // A link (to what its planter could not read) is moved as a link, then
    // removed: nothing of its target is kept.
    std::ofstream(dir / "secret") << "password";
    fs::create_symlink(dir / "secret", dir / "link");
    CHECK(smx::qmgr::quarantine_move((dir / "link").string(), (dir / "q").string(), "cdb-2", upto, why) == ELOOP);
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "q" / "cdb-2")));
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "link")));
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    CHECK(smx::qmgr::quarantine_move((dir / "fifo").string(), (dir / "q").string(), "cdb-3", upto, why) == EBADMSG);
    CHECK(why == "a FIFO");
    CHECK_FALSE(fs::exists(fs::symlink_status(dir / "q" / "cdb-3")));
    CHECK(smx::qmgr::quarantine_move((dir / "none").string(), (dir / "q").string(), "cdb-4", upto, why) == ENOENT);
    // Across file systems (a copy), where there is another one: the same.
    const fs::path shm = "/dev/shm/smx-quarantine-" + smx::new_ta_id();
    std::error_code ec;
    if (fs::create_directories(shm, ec) && !smx::content::same_file_system(shm.string(), dir.string())) {
        std::ofstream(shm / "msg") << "a message";
        CHECK(smx::qmgr::quarantine_move((shm / "msg").string(), (dir / "q").string(), "cdb-5", upto, why) == 0);
        CHECK(fs::file_size(dir / "q" / "cdb-5") == 9);
        CHECK_FALSE(fs::exists(shm / "msg"));
        fs::create_symlink(dir / "secret", shm / "link");
        CHECK(smx::qmgr::quarantine_move((shm / "link").string(), (dir / "q").string(), "cdb-6", upto, why) == ELOOP);
        CHECK_FALSE(fs::exists(dir / "q" / "cdb-6"));
        CHECK_FALSE(fs::exists(fs::symlink_status(shm / "link")));
        fs::remove_all(shm);
    }
    fs::remove_all(dir);
}
