#include "libsm/table_regex.hpp"
#include "libsm/table_text.hpp"
#include "tests/unit/libsm/table_dir.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <filesystem>

using namespace smx::table;
namespace fs = std::filesystem;

namespace {

std::shared_ptr<const Table> pcre(const std::string& text) {
    return regex_table("pcre:/t", text, "t", Dialect::pcre);
}
std::shared_ptr<const Table> regexp(const std::string& text) {
    return regex_table("regexp:/t", text, "t", Dialect::regexp);
}

} // namespace

TEST_CASE("pcre: first match wins, flags, negation, substitution", "[table][regex]") {
    const auto t = pcre("# comment\n"
                        "/^Subject:.*viagra/   REJECT no pills\n"
                        "/^Subject: (\\w+) (\\w+)/ WARN $2 ${1} $(1) $$5\n"
                        "/^X-Case: ABC$/i  case-sensitive\n"
                        "!/^(From|To|Subject|X-Case|Cont):/ OTHER\n"
                        "/^Cont: a\n"
                        "  b/x DUNNO continued\n");
    CHECK(t->pattern());
    CHECK(t->find("SUBJECT: Cheap VIAGRA").value == "REJECT no pills");  // case-insensitive
    CHECK(t->find("Subject: hello world").value == "WARN world hello hello $5");
    CHECK(t->find("X-Case: ABC").value == "case-sensitive");
    CHECK(t->find("X-Case: abc").status == Status::not_found);
    CHECK(t->find("Received: x").value == "OTHER");
    CHECK(t->find("From: a").status == Status::not_found);
    // A continuation is appended as it is: with x the blanks do not count.
    CHECK(t->find("Cont:ab").value == "DUNNO continued");
}

TEST_CASE("pcre: the key is one string, newlines and all", "[table][regex]") {
    const auto t = pcre("/^Subject: a.b$/ dotall\n/^X: a$/m multiline\n/^Y: a.b/s not-dotall\n");
    CHECK(t->find("Subject: a\r\n\tb").status == Status::not_found);  // two characters
    CHECK(t->find("Subject: a\nb").value == "dotall");                 // '.' matches a newline
    CHECK(t->find("X: a\n\tmore").value == "multiline");
    CHECK(t->find("Y: a\nb").status == Status::not_found);
}

TEST_CASE("pcre: if ... endif", "[table][regex]") {
    const auto t = pcre("if /^Subject:/\n"
                        "/money/ REJECT subject money\n"
                        "if !/urgent/\n"
                        "/offer/ HOLD calm offer\n"
                        "endif\n"
                        "endif\n"
                        "/money/ WARN money elsewhere\n");
    CHECK(t->find("Subject: money").value == "REJECT subject money");
    CHECK(t->find("Subject: an offer").value == "HOLD calm offer");
    CHECK(t->find("Subject: urgent offer").status == Status::not_found);
    CHECK(t->find("From: money").value == "WARN money elsewhere");
}

TEST_CASE("pcre: errors name the file and the line", "[table][regex]") {
    CHECK_THROWS_WITH(pcre("/ok/ x\n/(unclosed/ y\n"),
                      Catch::Contains("pcre:/t: t, line 2") && Catch::Contains("offset"));
    CHECK_THROWS_WITH(pcre("/a/ x\n/no-end x\n"), Catch::Contains("t, line 2: no closing delimiter"));
    CHECK_THROWS_WITH(pcre("/a/q x\n"), Catch::Contains("line 1: unknown flag \"q\""));
    CHECK_THROWS_WITH(pcre("/(a)/ $2\n"), Catch::Contains("line 1") && Catch::Contains("$2"));
    CHECK_THROWS_WITH(pcre("/(a)/ $0\n"), Catch::Contains("$0"));
    CHECK_THROWS_WITH(pcre("/(a)/ $x1\n"), Catch::Contains("not $1 to $99"));
    CHECK_THROWS_WITH(pcre("!/(a)/ $1\n"), Catch::Contains("negated"));
    CHECK_THROWS_WITH(pcre("if /a/\n/b/ c\n"), Catch::Contains("line 1: if without endif"));
    CHECK_THROWS_WITH(pcre("/a/ b\nendif\n"), Catch::Contains("line 2: endif without if"));
    CHECK_THROWS_WITH(pcre("if /a/ stray\nendif\n"), Catch::Contains("text after the pattern of an if"));
    CHECK_THROWS_WITH(pcre("hello world\n"), Catch::Contains("line 1: expected /pattern/"));
    CHECK_THROWS_WITH(pcre("  /a/ b\n"), Catch::Contains("continuation"));
    CHECK_THROWS_WITH(pcre(std::string("/a/ b\0c\n", 8)), Catch::Contains("NUL"));
    CHECK_THROWS_WITH(pcre("/a/ " + std::string(max_line, 'x') + "\n"), Catch::Contains("longer than"));
}

TEST_CASE("pcre: other delimiters, X ignored, empty results, unset groups", "[table][regex]") {
    const auto t = pcre("#comment\n"
                        "|a/b|X slash\n"
                        "/^(x)?y(z)/ [$1][$2]\n"
                        "/^empty$/\n");
    CHECK(t->find("a/b").value == "slash");
    CHECK(t->find("yz").value == "[][z]");
    CHECK(t->find("empty").found());
    CHECK(t->find("empty").value.empty());
    CHECK(pcre("/^$/ nothing\n")->find(std::string_view()).value == "nothing");
}

TEST_CASE("pcre: a pathological pattern fails the lookup, bounded", "[table][regex]") {
    const auto t = pcre("/^(a+)+$/ REJECT catastrophic\n");
    const std::string key = std::string(40, 'a') + "!";
    const auto start = std::chrono::steady_clock::now();
    CHECK(t->find(key).status == Status::failed);
    // Unbounded, 2^40 steps: hours. Bounded: far under the bound below on
    // any machine that runs the tests.
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
    CHECK(t->find(std::string(40, 'a')).value == "REJECT catastrophic");
}

TEST_CASE("regexp: POSIX syntax and regexp_table flags", "[table][regex]") {
    const auto t = regexp("/^Subject: [[:digit:]]{3,}$/ digits\n"
                          "/^A: [\\d]$/ bracket-backslash\n"
                          "/^B: x{,2}y$/ interval\n"
                          "/^C: \\(ab\\)\\{2\\}$/x basic\n"
                          "/^D: (a)+$/x basic-literal\n"
                          "/^E: .*\\<word\\>/ words\n"
                          "/^F: x$/m multiline\n"
                          "/^G: CASE$/i case\n");
    CHECK(t->find("subject: 12345").value == "digits");
    CHECK(t->find("Subject: 12").status == Status::not_found);
    CHECK(t->find("A: \\").value == "bracket-backslash");
    CHECK(t->find("A: d").value == "bracket-backslash");
    CHECK(t->find("A: 1").status == Status::not_found);
    CHECK(t->find("B: y").value == "interval");
    CHECK(t->find("B: xxxy").status == Status::not_found);
    CHECK(t->find("C: abab").value == "basic");
    CHECK(t->find("D: (a)+").value == "basic-literal");
    CHECK(t->find("D: a").status == Status::not_found);
    CHECK(t->find("E: a word here").value == "words");
    CHECK(t->find("E: swordfish").status == Status::not_found);
    CHECK(t->find("F: x\nmore").value == "multiline");
    CHECK(t->find("G: CASE").value == "case");
    CHECK(t->find("G: case").status == Status::not_found);
    // Without m, '$' is the end of the key only and '.' matches a newline.
    const auto e = regexp("/^H: a.b$/ h\n");
    CHECK(e->find("H: a\nb").value == "h");
    CHECK(e->find("H: a b\n").status == Status::not_found);
    CHECK_THROWS_WITH(regexp("/a/s x\n"), Catch::Contains("unknown flag \"s\""));
    CHECK_THROWS_WITH(regexp("/[[.ch.]]/ x\n"), Catch::Contains("line 1") && Catch::Contains("collating"));
    CHECK_THROWS_WITH(regexp("/a\\/ x\n"), Catch::Contains("no closing delimiter"));
}

TEST_CASE("pcre: opened from a file as tables are, in a list, whole keys only", "[table][regex]") {
    TempDir d;
    const auto path = d.write("checks", "/^spam@/ REJECT pattern\n/example\\.org$/ OK org\n");
    const auto t = open("pcre:" + path);
    CHECK(t->pattern());
    CHECK(t->find("spam@example.com").value == "REJECT pattern");
    // In an access(5) search the parts after the whole address (the
    // domain, its parents, "user@") are not matched against the patterns.
    const auto list = TableList::open({"pcre:" + path});
    CHECK(list.find_first({"x@example.org", "example.org"}).value == "OK org");
    CHECK(list.find_first({"x@example.net", "example.org", "spam@"}).status == Status::not_found);
    CHECK(list.find("example.org", true).status == Status::not_found);
    fs::create_symlink(path, d.path / "link");
    CHECK_THROWS_WITH(open("regexp:" + (d.path / "link").string()), Catch::Contains("symbolic link"));
    CHECK_THROWS_WITH(open("pcre:relative"), Catch::Contains("absolute path"));
    d.write("bad", "/ok/ x\n/a(/ y\n");
    CHECK_THROWS_WITH(open("pcre:" + (d.path / "bad").string()),
                      Catch::Contains("/bad, line 2: error in the pattern"));
    check_spec("regexp:/etc/smx/x");
}

TEST_CASE("posix_to_pcre2", "[table][regex]") {
    CHECK(posix_to_pcre2("a{,3}", true) == "a{0,3}");
    CHECK(posix_to_pcre2("[]a\\]", true) == "[\\]a\\\\]");
    CHECK(posix_to_pcre2("*a\\(b\\)\\{1,\\}+?", false) == "\\*a(b){1,}\\+\\?");
    CHECK(posix_to_pcre2("a^b$c$", false) == "a\\^b\\$c$");
    CHECK_THROWS_AS(posix_to_pcre2("[abc", true), TextError);
    CHECK_THROWS_AS(posix_to_pcre2("abc\\", true), TextError);
}
