#include "libsm/lookup_table.hpp"
#include "libsm/table_text.hpp"
#include "tests/unit/libsm/table_dir.hpp"

#include <catch2/catch.hpp>
#include <db_cxx.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

using namespace smx::table;
namespace fs = std::filesystem;

namespace {

std::vector<Entry> parse(std::string_view text, Syntax s = Syntax::table) {
    std::vector<Entry> out;
    parse_text(text, "t", s, [&](Entry&& e) { out.push_back(std::move(e)); });
    return out;
}

} // namespace

TEST_CASE("table text: entries, comments, continuations, case", "[table]") {
    const auto e = parse("# comment\n\nUser@Example.COM  OK\n  # indented comment\n"
                         "list a,\n  b,\n\tc\r\nkey\tvalue with  spaces  \n");
    REQUIRE(e.size() == 3);
    CHECK(e[0].key == "user@example.com");
    CHECK(e[0].value == "OK");
    CHECK(e[0].line == 3);
    CHECK(e[1].key == "list");
    CHECK(e[1].value == "a, b, c");
    CHECK(e[1].line == 5);
    CHECK(e[2].value == "value with  spaces");
}

TEST_CASE("table text: aliases syntax", "[table]") {
    const auto e = parse("postmaster: root\nRoot:\tadmin@example.com,\n  other@example.com\n",
                         Syntax::aliases);
    REQUIRE(e.size() == 2);
    CHECK(e[0].key == "postmaster");
    CHECK(e[0].value == "root");
    CHECK(e[1].key == "root");
    CHECK(e[1].value == "admin@example.com, other@example.com");
    CHECK_THROWS_WITH(parse("postmaster root\n", Syntax::aliases),
                      Catch::Contains("t, line 1") && Catch::Contains("name: address"));
}

TEST_CASE("table text: bad lines name their line", "[table]") {
    CHECK_THROWS_WITH(parse("a 1\nlonely\n"), Catch::Contains("t, line 2") && Catch::Contains("no value"));
    CHECK_THROWS_WITH(parse("  starts indented\n"), Catch::Contains("line 1") && Catch::Contains("continuation"));
    CHECK_THROWS_WITH(parse(std::string("a\x01z v\n")), Catch::Contains("control character"));
    CHECK_THROWS_WITH(parse(std::string("a v\nb \0 v\n", 11)), Catch::Contains("line 2") && Catch::Contains("NUL"));
    CHECK_THROWS_WITH(parse("k " + std::string(max_line, 'x') + "\n"), Catch::Contains("longer than"));
    CHECK_THROWS_WITH(parse("k v\n" + std::string(max_line / 2, 'x') + " 1\n " + std::string(max_line / 2, 'y') + "\n"),
                      Catch::Contains("line 2") && Catch::Contains("longer than"));
}

TEST_CASE("texthash and inline tables", "[table]") {
    TempDir d;
    const auto path = d.write("t", "A@Example.com first\na@example.com second\n@example.com catch-all\n");
    const auto t = open("texthash:" + path);
    CHECK(t->find("a@EXAMPLE.com").value == "first");  // the first of a key given twice
    CHECK(t->find("b@example.com").status == Status::not_found);
    CHECK(t->find("@example.com").value == "catch-all");

    const auto i = open("inline:{ a=1, B = two words , {c = x, y}, }");
    CHECK(i->find("a").value == "1");
    CHECK(i->find("b").value == "two words");
    CHECK(i->find("c").value == "x, y");
    CHECK_THROWS_WITH(open("inline:{ a=1, {b=2 }"), Catch::Contains("unbalanced"));
    CHECK_THROWS_WITH(open("inline:{ a }"), Catch::Contains("not key=value"));
}

TEST_CASE("opening: clear errors, no links, no FIFOs", "[table]") {
    TempDir d;
    CHECK_THROWS_WITH(open("nosuch:/x"), Catch::Contains("unknown table type"));
    CHECK_THROWS_WITH(open("/etc/passwd"), Catch::Contains("expected type:name"));
    CHECK_THROWS_WITH(open("hash:relative"), Catch::Contains("absolute path"));
    CHECK_THROWS_WITH(open("hash:" + (d.path / "missing").string()),
                      Catch::Contains("missing.db") && Catch::Contains("No such file"));
    const auto real = d.write("real", "k v\n");
    fs::create_symlink(real, d.path / "link");
    CHECK_THROWS_WITH(open("texthash:" + (d.path / "link").string()), Catch::Contains("symbolic link"));
    REQUIRE(::mkfifo((d.path / "fifo").c_str(), 0600) == 0);
    CHECK_THROWS_WITH(open("texthash:" + (d.path / "fifo").string()), Catch::Contains("not a regular file"));
    d.write("bad", "k v\nnovalue\n");
    CHECK_THROWS_WITH(open("texthash:" + (d.path / "bad").string()),
                      Catch::Contains("bad, line 2"));
    // Not a Berkeley DB file.
    d.write("junk.db", std::string(8192, 'j'));
    CHECK_THROWS_WITH(open("hash:" + (d.path / "junk").string()), Catch::Contains("as a hash file"));
}

TEST_CASE("hash: reads keys with their NUL, as postmap writes them, and without", "[table]") {
    TempDir d;
    const auto make = [&](const std::string& name, bool nul) {
        const std::string path = (d.path / (name + ".db")).string();
        Db db(nullptr, 0);
        db.open(nullptr, path.c_str(), nullptr, DB_HASH, DB_CREATE, 0600);
        for (std::string k : {"with@example.com", "other@example.com"}) {
            std::string v = "OK";
            if (nul) k.push_back('\0'), v.push_back('\0');
            Dbt key(k.data(), static_cast<u_int32_t>(k.size()));
            Dbt val(v.data(), static_cast<u_int32_t>(v.size()));
            db.put(nullptr, &key, &val, 0);
        }
        db.close(0);
        return open("hash:" + (d.path / name).string());
    };
    for (const bool nul : {true, false}) {
        const auto t = make(nul ? "nul" : "plain", nul);
        CHECK(t->find("WITH@example.com").value == "OK");
        CHECK(t->find("other@example.com").found());
        CHECK(t->find("nobody").status == Status::not_found);
        CHECK_THROWS_WITH(open("btree:" + (d.path / (nul ? "nul" : "plain")).string()),
                          Catch::Contains("as a btree file"));
    }
}

TEST_CASE("table lists: first answer wins, a failure is not a miss", "[table]") {
    struct Failing final : Table {
        Failing() : Table("failing:") {}
        Lookup find(std::string_view) const override { return {Status::failed, {}}; }
    };
    const auto a = open("inline:{ x=a }");
    const auto b = open("inline:{ x=b, y=b }");
    const TableList ab({a, b});
    CHECK(ab.find("x").value == "a");
    CHECK(ab.find("y").value == "b");
    CHECK(ab.find_first({"z", "y", "x"}).value == "b");  // keys in order, each through all tables
    const TableList failing({a, std::make_shared<Failing>(), b});
    CHECK(failing.find("x").value == "a");
    CHECK(failing.find("y").failed());
}

TEST_CASE("search orders as postfix documents them", "[table]") {
    using V = std::vector<std::string>;
    CHECK(address_keys("User+Ext@Sub.Example.COM", "+", Order::access) ==
          V{"user+ext@sub.example.com", "user@sub.example.com", "sub.example.com", "example.com",
            "com", "user+ext@", "user@"});
    CHECK(address_keys("user+ext@example.com", "", Order::access) ==
          V{"user+ext@example.com", "example.com", "com", "user+ext@"});
    CHECK(address_keys("", "+", Order::access) == V{"<>"});
    CHECK(address_keys("", "+", Order::address).empty());
    CHECK(address_keys("u-x@example.com", "+-", Order::address) ==
          V{"u-x@example.com", "u@example.com", "@example.com"});
    CHECK(address_keys("+x@example.com", "+", Order::address) ==  // no base: no extension
          V{"+x@example.com", "@example.com"});
    CHECK(address_keys("u@a.example.com", "+", Order::transport) ==
          V{"u@a.example.com", "a.example.com", ".example.com", ".com", "*"});
    CHECK(domain_keys("Mail.Example.com.", false) == V{"mail.example.com", "example.com", "com"});
    CHECK(client_address_keys("192.0.2.10") == V{"192.0.2.10", "192.0.2", "192.0", "192"});
    CHECK(client_address_keys("2001:DB8::1") == V{"2001:db8::1", "2001:db8", "2001"});
}

TEST_CASE("hash: cut short is no answer, at open or under a reader", "[table]") {
    TempDir d;
    const std::string path = (d.path / "t.db").string();
    {
        Db db(nullptr, 0);
        db.open(nullptr, path.c_str(), nullptr, DB_HASH, DB_CREATE, 0600);
        for (int i = 0; i < 3000; ++i) {
            std::string k = "user" + std::to_string(i) + "@example.org";
            std::string v = "REJECT";
            Dbt key(k.data(), static_cast<u_int32_t>(k.size()));
            Dbt val(v.data(), static_cast<u_int32_t>(v.size()));
            db.put(nullptr, &key, &val, 0);
        }
        db.close(0);
    }
    const auto t = open("hash:" + (d.path / "t").string());
    CHECK(t->find("nobody@example.org").status == Status::not_found);
    fs::resize_file(path, 4096);
    // What the reader loses would read as empty pages: no "not found".
    CHECK(t->find("user2999@example.org").status == Status::failed);
    CHECK(t->find("nobody@example.org").status == Status::failed);
    CHECK_THROWS_WITH(open("hash:" + (d.path / "t").string()), Catch::Contains("cut short"));
}
