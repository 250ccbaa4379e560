// smx::table::build (`smx map build`, newaliases) and tables that follow
// their file: real files, real renames, real Berkeley DB.
#include "libsm/lookup_table.hpp"
#include "libsm/table_build.hpp"
#include "tests/unit/libsm/table_dir.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>

using namespace smx::table;
namespace fs = std::filesystem;

namespace {

// What d holds besides the named files (a temporary file left behind).
std::vector<std::string> others(const TempDir& d, std::initializer_list<std::string> names) {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(d.path)) {
        const std::string n = e.path().filename().string();
        if (std::find(names.begin(), names.end(), n) == names.end()) out.push_back(n);
    }
    return out;
}

std::vector<std::string> warnings;
BuildResult build_table(const std::string& source, Syntax s = Syntax::table, DbKind k = DbKind::hash) {
    warnings.clear();
    return build(source, k, s, [](const std::string& w) { warnings.push_back(w); });
}

std::map<std::string, std::string> entries_of(const Table& t) {
    std::map<std::string, std::string> out;
    t.each([&](std::string_view k, std::string_view v) { out.emplace(k, v); });
    return out;
}

// Asks until answer says yes, for up to 5 s: the table looks at its file at
// most once a second.
template <class F>
bool eventually(F answer) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < until) {
        if (answer()) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return answer();
}

} // namespace

TEST_CASE("build: hash and btree round trip, as postmap stores them", "[table][build]") {
    TempDir d;
    const auto src = d.write("access", "# clients\nUser@Example.com OK\nlist a,\n  b\n10.0.0 REJECT go away\n");
    ::chmod(src.c_str(), 0640);
    for (const auto kind : {DbKind::hash, DbKind::btree}) {
        const auto r = build_table(src, Syntax::table, kind);
        CHECK(r.entries == 3);
        CHECK(r.duplicates == 0);
        CHECK(warnings.empty());
        const auto t = open((kind == DbKind::hash ? "hash:" : "btree:") + src);
        CHECK(t->find("USER@example.com").value == "OK");
        CHECK(t->find("list").value == "a, b");
        CHECK(t->find("10.0.0").value == "REJECT go away");
        CHECK(t->find("other").status == Status::not_found);
        CHECK(entries_of(*t) == std::map<std::string, std::string>{
                                    {"user@example.com", "OK"}, {"list", "a, b"}, {"10.0.0", "REJECT go away"}});
        struct stat st{};
        REQUIRE(::stat((src + ".db").c_str(), &st) == 0);
        CHECK((st.st_mode & 07777) == 0640);  // the source's mode
        CHECK(others(d, {"access", "access.db"}).empty());  // no temporary file left
    }
}

TEST_CASE("build: a key given twice keeps its first value, both lines named", "[table][build]") {
    TempDir d;
    const auto src = d.write("t", "a 1\nb 2\nA 3\nc 4\nb 5\n");
    const auto r = build_table(src);
    CHECK(r.entries == 3);
    CHECK(r.duplicates == 2);
    REQUIRE(warnings.size() == 2);
    CHECK(warnings[0] == src + ", line 3: duplicate entry \"a\" (first at line 1); ignored");
    CHECK(warnings[1] == src + ", line 5: duplicate entry \"b\" (first at line 2); ignored");
    CHECK(open("hash:" + src)->find("a").value == "1");

    std::string many;
    for (std::size_t i = 0; i < max_duplicate_warnings + 5; ++i) many += "k v" + std::to_string(i) + "\n";
    build_table(d.write("many", many));
    REQUIRE(warnings.size() == max_duplicate_warnings + 1);
    // max + 4 repeats of the first "k"
    CHECK(warnings.back() == (d.path / "many").string() + ": 4 more duplicate entries ignored");
}

TEST_CASE("build: bad input names its line and leaves the old table", "[table][build]") {
    TempDir d;
    const auto src = d.write("t", "good one\n");
    build_table(src);
    d.write("t", "a 1\nb 2\nlonely\n");
    CHECK_THROWS_WITH(build_table(src), Catch::Contains(src + ", line 3") && Catch::Contains("no value"));
    d.write("t", "a 1\n" + std::string(max_line + 10, 'x') + " v\n");
    CHECK_THROWS_WITH(build_table(src), Catch::Contains(src + ", line 2") && Catch::Contains("longer than"));
    d.write("t", "a 1\n# " + std::string(3 * max_line, 'c') + "\n");  // no line is held whole
    CHECK_THROWS_WITH(build_table(src), Catch::Contains("line 2") && Catch::Contains("longer than"));
    d.write("t", std::string("a 1\nb\x01 2\n"));
    CHECK_THROWS_WITH(build_table(src), Catch::Contains("line 2") && Catch::Contains("control character"));
    d.write("t", "postmaster root\n");
    CHECK_THROWS_WITH(build_table(src, Syntax::aliases), Catch::Contains("line 1") && Catch::Contains("name: address"));
    CHECK(open("hash:" + src)->find("good").value == "one");  // the old table, untouched
    CHECK(others(d, {"t", "t.db"}).empty());

    CHECK_THROWS_WITH(build_table((d.path / "missing").string()), Catch::Contains("No such file"));
    fs::create_symlink(src, d.path / "link");
    CHECK_THROWS_WITH(build_table((d.path / "link").string()), Catch::Contains("symbolic link"));
    CHECK_FALSE(fs::exists(d.path / "link.db"));
}

TEST_CASE("build: aliases(5) syntax", "[table][build]") {
    TempDir d;
    const auto src = d.write("aliases", "# aliases\npostmaster: root\nRoot: admin@example.com,\n\tother@example.com\n");
    CHECK(build_table(src, Syntax::aliases).entries == 2);
    const auto t = open("hash:" + src);
    CHECK(t->find("postmaster").value == "root");
    CHECK(t->find("root").value == "admin@example.com, other@example.com");
}

TEST_CASE("a table replaced while open: the open one answers until it follows the new file",
          "[table][build]") {
    TempDir d;
    const auto src = d.write("t", "k old\n");
    build_table(src);
    const auto t = open("hash:" + src);
    CHECK(t->find("k").value == "old");
    d.write("t", "k new\nother x\n");
    build_table(src);
    // Right after the rename the open handle still reads the old file whole:
    // "old" or (once a second has passed) "new", never a mix or a miss.
    const auto l = t->find("k");
    CHECK(l.found());
    CHECK((l.value == "old" || l.value == "new"));
    CHECK(eventually([&] { return t->find("k").value == "new"; }));
    CHECK(t->find("other").value == "x");

    // A corrupt file renamed in: lookups fail (451 at callers), never "not
    // found"; a good build brings it back.
    const auto junk = d.write("junk", std::string(8192, 'j'));
    REQUIRE(::rename(junk.c_str(), (src + ".db").c_str()) == 0);
    CHECK(eventually([&] { return t->find("k").failed(); }));
    CHECK(t->find("nothing").failed());
    CHECK_THROWS_WITH(open("hash:" + src), Catch::Contains("as a hash file"));
    build_table(src);
    CHECK(eventually([&] { return t->find("k").value == "new"; }));

    // Removed: failed too, until it is back.
    REQUIRE(::unlink((src + ".db").c_str()) == 0);
    CHECK(eventually([&] { return t->find("k").failed(); }));
    d.write("t", "k back\n");
    build_table(src);
    CHECK(eventually([&] { return t->find("k").value == "back"; }));
}

TEST_CASE("texthash: follows its file too", "[table][build]") {
    TempDir d;
    const auto src = d.write("t", "k one\n");
    const auto t = open("texthash:" + src);
    CHECK(t->find("k").value == "one");
    const auto next = d.write("t.new", "k two\n");
    REQUIRE(::rename(next.c_str(), src.c_str()) == 0);
    CHECK(eventually([&] { return t->find("k").value == "two"; }));
}

TEST_CASE("lookups on several threads while the table is rebuilt", "[table][build]") {
    TempDir d;
    std::string text;
    for (int i = 0; i < 1000; ++i) text += "key" + std::to_string(i) + " v0\n";
    const auto src = d.write("t", text);
    build_table(src);
    const auto t = open("hash:" + src);
    std::atomic<bool> stop{false};
    std::atomic<int> wrong{0};
    std::atomic<long> lookups{0};
    std::vector<std::thread> threads;
    for (int n = 0; n < 4; ++n)
        threads.emplace_back([&, n] {
            for (int i = n; !stop; i = (i + 7) % 1000, ++lookups) {
                const auto l = t->find("key" + std::to_string(i));
                if (!l.found() || (l.value != "v0" && l.value != "v1" && l.value != "v2")) ++wrong;
            }
        });
    for (const char* v : {"v1", "v2"}) {
        std::string next;
        for (int i = 0; i < 1000; ++i) next += "key" + std::to_string(i) + " " + v + "\n";
        d.write("t", next);
        build_table(src);
        CHECK(eventually([&] { return t->find("key1").value == v; }));
    }
    stop = true;
    for (auto& th : threads) th.join();
    CHECK(wrong == 0);
    CHECK(lookups > 0);
}

TEST_CASE("check_spec: the syntax of a table name, without opening it", "[table]") {
    CHECK_NOTHROW(check_spec("hash:/nonexistent/file"));
    CHECK_NOTHROW(check_spec("inline:{a=b}"));
    CHECK_THROWS_WITH(check_spec("hash:relative"), Catch::Contains("absolute path"));
    CHECK_THROWS_WITH(check_spec("cdb:/x"), Catch::Contains("unknown table type"));
    CHECK_THROWS_WITH(check_spec("/etc/aliases"), Catch::Contains("expected type:name"));
    CHECK_THROWS_WITH(check_spec("inline:{a}"), Catch::Contains("not key=value"));
    CHECK(buildable("btree:/x")->kind == DbKind::btree);
    CHECK(buildable("hash:/x")->source == "/x");
    CHECK_FALSE(buildable("texthash:/x"));
}
