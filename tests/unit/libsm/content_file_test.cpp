// Content files: durable writes appear whole under their final name or not
// at all.
#include "content_file.hpp"

#include "ids.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

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
    const fs::path dir = fs::temp_directory_path() / ("smx-content-" + sm::new_ta_id());
    const std::string big(3 << 20, 'm');
    const fs::path path = dir / "a" / "b" / "FILE";  // parents made on first use
    REQUIRE(sm::content::write_durable(path.string(), big) == 0);
    CHECK(slurp(path) == big);
    CHECK_FALSE(fs::exists(path.string() + ".tmp"));
    struct stat st {};
    REQUIRE(::stat(path.c_str(), &st) == 0);
    CHECK((st.st_mode & 0707) == 0600);  // group read unless the umask takes it
    REQUIRE(sm::content::write_durable((dir / "private").string(), "x", 0600) == 0);
    REQUIRE(::stat((dir / "private").c_str(), &st) == 0);
    CHECK((st.st_mode & 0777) == 0600);

    // A write that failed on the way: the .tmp goes, the final name never appears.
    int fd = -1;
    const std::string tmp = (dir / "c.tmp").string();
    REQUIRE(sm::content::open_tmp(tmp, fd) == 0);
    REQUIRE(sm::content::write_all(fd, "partial") == 0);
    CHECK(sm::content::finish(fd, EIO, tmp, (dir / "c").string()) == EIO);
    CHECK_FALSE(fs::exists(tmp));
    CHECK_FALSE(fs::exists(dir / "c"));

    // A parent that is a file: an error value, no file.
    std::ofstream(dir / "plain") << "x";
    CHECK(sm::content::write_durable((dir / "plain" / "d").string(), "data") == ENOTDIR);
    CHECK(sm::content::write_all(-1, "x") == EBADF);
    fs::remove_all(dir);
}
