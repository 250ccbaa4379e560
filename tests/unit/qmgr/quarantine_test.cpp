// The quarantine writer: the whole copy, 0600, or an error naming the path.
#include "quarantine.hpp"

#include "ids.hpp"

#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using smx::qmgr::quarantine_write;

TEST_CASE("quarantine_write writes the whole copy, private, and reports failures") {
    const fs::path dir = fs::temp_directory_path() / ("smx-quarantine-" + sm::new_ta_id());
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
