#include "smtps/content_checks.hpp"

#include "libsm/table_regex.hpp"
#include "tests/unit/libsm/failing_table.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using smx::smtps::CheckEvent;
using smx::smtps::ContentChecks;
using smx::smtps::ContentVerdict;
using smx::table::TableList;

namespace {

TableList pcre(const std::string& text) {
    if (text.empty()) return {};
    return TableList({smx::table::regex_table("pcre:/t", text, "t", smx::table::Dialect::pcre)});
}

struct Run {
    std::string stored;
    std::vector<std::string> events;  // "action what content: text"
    ContentVerdict verdict;
};

// content through the checks, fed in pieces of `step` bytes.
Run check(const TableList& header, const TableList& body, std::string_view content,
          std::size_t step = 7, std::uint64_t header_limit = 102400, std::uint64_t body_limit = 51200) {
    Run r;
    ContentChecks c(
        header, body, header_limit, body_limit, [&r](std::string_view s) { r.stored += s; },
        [&r](const CheckEvent& e) {
            r.events.push_back(std::string(e.action) + " " + std::string(e.what) + " " +
                               std::string(e.content) + ": " + std::string(e.text));
        });
    for (std::size_t i = 0; i < content.size(); i += step) c.feed(content.substr(i, step));
    c.finish();
    r.verdict = c.verdict();
    return r;
}

const std::string message = "From: a@example.com\r\n"
                            "Subject: hello\r\n\tfolded world\r\n"
                            "X-Spam: yes\r\n"
                            "\r\n"
                            "line one\r\n"
                            "buy pills now\r\n"
                            "last line\r\n";

} // namespace

TEST_CASE("content checks: nothing matches, nothing changes", "[content_checks]") {
    const auto h = pcre("/^X-Never:/ REJECT\n");
    const auto b = pcre("/never/ REJECT\n");
    for (const std::size_t step : {1u, 3u, 4096u}) {
        const Run r = check(h, b, message, step);
        CHECK(r.stored == message);
        CHECK(r.events.empty());
        CHECK(r.verdict.kind == ContentVerdict::Kind::accept);
    }
    CHECK(check({}, {}, message).stored == message);
}

TEST_CASE("content checks: a folded field is one key, with its line break", "[content_checks]") {
    const auto h = pcre("/^Subject: hello\\n\\tfolded world$/ REJECT 5.7.0 folded\n");
    const Run r = check(h, {}, message);
    CHECK(r.verdict.kind == ContentVerdict::Kind::reject);
    CHECK(r.verdict.reply == "550 5.7.0 folded");
    CHECK(r.verdict.why == smx::Rejection::header_check);
    REQUIRE(r.events.size() == 1);
    CHECK(r.events[0] == "reject header Subject: hello folded world: 5.7.0 folded");
}

TEST_CASE("content checks: REJECT, DISCARD stop; what is stored stops too", "[content_checks]") {
    const Run r = check(pcre("/^X-Spam: yes/ REJECT\n/^From:/ WARN seen\n"), {}, message);
    CHECK(r.verdict.reply == "550 5.7.1 message content rejected");
    CHECK(r.stored == "From: a@example.com\r\nSubject: hello\r\n\tfolded world\r\n");
    CHECK(r.events.size() == 2);  // the WARN before, nothing after
    const Run d = check({}, pcre("/pills/ DISCARD spam\n"), message);
    CHECK(d.verdict.kind == ContentVerdict::Kind::discard);
    CHECK(d.events == std::vector<std::string>{"discard body buy pills now: spam"});
    const Run t = check({}, pcre("/pills/ REJECT 4.7.1 try later\n"), message);
    CHECK(t.verdict.reply == "451 4.7.1 try later");
    CHECK(t.verdict.why == smx::Rejection::body_check);
}

TEST_CASE("content checks: HOLD, WARN, INFO keep the message", "[content_checks]") {
    const Run r = check(pcre("/^X-Spam:/ HOLD review\n/^Subject:/ WARN subject seen\n"),
                        pcre("/^line one$/ INFO first\n"), message);
    CHECK(r.verdict.kind == ContentVerdict::Kind::accept);
    CHECK(r.verdict.hold == "header X-Spam: yes: review");
    CHECK(r.stored == message);
    CHECK(r.events == std::vector<std::string>{"warning header Subject: hello folded world: subject seen",
                                                "hold header X-Spam: yes: review",
                                                "info body line one: first"});
}

TEST_CASE("content checks: IGNORE, PREPEND, REPLACE edit what is stored", "[content_checks]") {
    const Run r = check(pcre("/^X-Spam:/ IGNORE\n"
                             "/^From: (.*)/ PREPEND X-Original-From: $1\n"
                             "/^Subject: (hello)/ REPLACE Subject: [checked] $1\n"),
                        pcre("/^buy (.*)/ REPLACE sell $1\n/^last/ PREPEND added line\n"), message);
    CHECK(r.stored == "X-Original-From: a@example.com\r\n"
                      "From: a@example.com\r\n"
                      "Subject: [checked] hello\r\n"
                      "\r\n"
                      "line one\r\n"
                      "sell pills now\r\n"
                      "added line\r\n"
                      "last line\r\n");
    CHECK(r.verdict.kind == ContentVerdict::Kind::accept);
    // A header PREPEND or REPLACE that is no header field is refused.
    const Run bad = check(pcre("/^From:/ PREPEND not a field\n/^X-Spam:/ REPLACE\n"), {}, message);
    CHECK(bad.stored == message);
    REQUIRE(bad.events.size() == 2);
    CHECK(bad.events[0].starts_with("unsupported header From: a@example.com: PREPEND needs a header field"));
}

TEST_CASE("content checks: a failed lookup is a temporary failure", "[content_checks]") {
    const TableList failing = smx::test::open_tables({"fail:"});
    const Run h = check(failing, {}, message);
    CHECK(h.verdict.kind == ContentVerdict::Kind::tempfail);
    CHECK(h.verdict.reply.starts_with("451 4.3.0"));
    CHECK(h.verdict.why == smx::Rejection::policy_unavailable);
    const Run b = check({}, pcre("/^(a+)+$/ REJECT\n"), "Subject: x\r\n\r\n" + std::string(40, 'a') + "!\r\n");
    CHECK(b.verdict.kind == ContentVerdict::Kind::tempfail);
    CHECK(b.verdict.reply == "451 4.3.0 Error: temporary body_checks lookup failure");
}

TEST_CASE("content checks: body_checks_size_limit and long lines", "[content_checks]") {
    std::string body;
    for (int i = 0; i < 100; ++i) body += "line " + std::to_string(i) + " padding padding\r\n";
    const std::string content = "Subject: x\r\n\r\n" + body;
    // Lines that start within the first 500 bytes of body are checked.
    const Run r = check({}, pcre("/^line (\\d+) / WARN $1\n"), content, 13, 102400, 500);
    CHECK(r.stored == content);
    REQUIRE(!r.events.empty());
    CHECK(r.events.size() == 21);  // lines 0-9 are 24 bytes, the others 25: 20 starts at 490
    CHECK(r.events.back() == "warning body line 20 padding padding: 20");
    // A line longer than a piece is checked a piece at a time.
    const std::string lng = "Subject: x\r\n\r\n" + std::string(5000, 'x') + "TAIL\r\n";
    const Run l = check({}, pcre("/^x+$/ WARN piece\n/TAIL$/ REJECT tail\n"), lng, 1000);
    CHECK(l.events.size() == 3);
    CHECK(l.verdict.reply == "550 5.7.1 tail");
}

TEST_CASE("content checks: past header_size_limit the rest is body, kept", "[content_checks]") {
    std::string header;
    for (int i = 0; i < 100; ++i) header += "X-H" + std::to_string(i) + ": value\r\n";
    const std::string content = header + "\r\nbody\r\n";
    const Run r = check(pcre("/^X-H/ WARN h\n"), {}, content, 64, 1024);
    CHECK(r.stored == content);
    CHECK(r.events.size() < 100);
    CHECK(r.events.size() > 50);
}

TEST_CASE("content checks: PREPEND and REPLACE are bounded per message", "[content_checks]") {
    std::string body;
    for (int i = 0; i < 2000; ++i) body += "l\r\n";
    const std::string big(1000, 'p');
    const Run r = check({}, pcre("/^l$/ PREPEND " + big + "\n"), "S: x\r\n\r\n" + body, 4096,
                        102400, 1 << 20);
    CHECK(r.stored.size() < smx::smtps::max_check_additions + 4096 + body.size());
    CHECK(r.events.back().find("past the") != std::string::npos);
}
