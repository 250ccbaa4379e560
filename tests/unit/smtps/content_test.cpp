// ContentReader on its own: what it stores and what it reports.
#include "content.hpp"

#include <catch2/catch.hpp>

using smtps::ContentReader;
using sm::smtp::Line;

namespace {

// Feeds complete CRLF lines (bare: LF only); returns what was stored.
std::string feed(ContentReader& c, std::initializer_list<std::pair<std::string, bool>> lines) {
    std::string out;
    for (const auto& [text, bare] : lines) {
        Line l;
        l.text = text;
        l.complete = true;
        l.bare_lf = bare;
        if (c.feed(l, [&](std::string_view b) { out.append(b); })) break;
    }
    return out;
}

} // namespace

TEST_CASE("dot-unstuffing and the end-of-data line") {
    ContentReader c(false, 1000);
    CHECK(feed(c, {{"Subject: x", false}, {"", false}, {"..a", false}, {".", false},
                   {"after", false}}) == "Subject: x\r\n\r\n.a\r\n");
}

TEST_CASE("a dot after a bare LF does not end DATA") {
    ContentReader c(true, 1000);
    CHECK(feed(c, {{"a", true}, {".", false}, {"b", false}, {".", false}}) == "a\r\n\r\nb\r\n");
}

TEST_CASE("normalised bare CRs count towards the size limit (found by fuzz/data_reader)") {
    ContentReader c(true, 10);
    feed(c, {{"a\rb\rc\rd", false}});  // 7 bytes received, 12 stored with CRLF
    CHECK(c.result().too_big);
    ContentReader d(true, 12);
    CHECK(feed(d, {{"a\rb\rc\rd", false}}) == "a\r\nb\r\nc\r\nd\r\n");
    CHECK_FALSE(d.result().too_big);
}

TEST_CASE("bare CR and bare LF are flagged in reject mode, hops are counted") {
    ContentReader c(false, 1000);
    feed(c, {{"Received: a", false}, {"received: b", false}, {"x\ry", false}});
    CHECK(c.result().bare_eol);
    CHECK(c.result().hops == 2);
}
