// ContentReader on its own: what it stores and what it reports.
#include "smtps/content.hpp"

#include <catch2/catch.hpp>

using smx::smtps::BdatContent;
using smx::smtps::ContentReader;
using smx::smtp::Line;

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

namespace {

// Feeds BDAT chunks as cut; returns what was stored.
std::string chunks(BdatContent& c, std::initializer_list<std::string_view> pieces) {
    std::string out;
    auto put = [&](std::string_view b) { out.append(b); };
    for (auto p : pieces) c.feed(p, put);
    c.finish(put);
    return out;
}

} // namespace

TEST_CASE("BDAT content: no dots, CRLF split across chunks is one CRLF") {
    BdatContent c(false, 1000);
    CHECK(chunks(c, {"Received: a\r", "\nSubject: x\r\n\r\n.\r\n", "..b\r", "\n", "end"}) ==
          "Received: a\r\nSubject: x\r\n\r\n.\r\n..b\r\nend\r\n");
    CHECK_FALSE(c.result().bare_eol);
    CHECK(c.result().hops == 1);
}

TEST_CASE("BDAT content: bare LF and bare CR, however cut, are seen") {
    for (auto pieces : {std::initializer_list<std::string_view>{"a\nb"},
                        std::initializer_list<std::string_view>{"a\r", "b\r\n"},
                        std::initializer_list<std::string_view>{"a\r\n.\r", "MAIL\r\n"},
                        std::initializer_list<std::string_view>{"a\r\n", "\n.\r\n"},
                        std::initializer_list<std::string_view>{"a\r\n", "x\r"}}) {
        BdatContent c(false, 1000);
        chunks(c, pieces);
        CHECK(c.result().bare_eol);
    }
}

TEST_CASE("BDAT content: bare LF and CR normalised when configured") {
    BdatContent c(true, 1000);
    CHECK(chunks(c, {"a\nb\r", "c\r", "\n", "d\r"}) == "a\r\nb\r\nc\r\nd\r\n\r\n");
    CHECK_FALSE(c.result().bare_eol);
}

TEST_CASE("BDAT content: the size limit counts what is stored") {
    BdatContent c(false, 10);
    chunks(c, {"0123456789"});  // 10 bytes sent, 12 stored with the final CRLF
    CHECK(c.result().too_big);
}

TEST_CASE("the first Message-ID of the header is kept for the log, folded or not, cut when long") {
    {
        ContentReader c(false, 100000);
        feed(c, {{"Subject: x", false}, {"message-id:   <a@b.example> ", false},
                 {"Message-ID: <second@b.example>", false}, {"", false},
                 {"Message-ID: <body@b.example>", false}, {".", false}});
        CHECK(c.result().message_id == "<a@b.example>");
    }
    {
        ContentReader c(false, 100000);
        feed(c, {{"Message-ID:", false}, {"\t<folded@b.example>", false}, {"", false}, {".", false}});
        CHECK(c.result().message_id == "<folded@b.example>");
    }
    {
        ContentReader c(false, 100000);
        feed(c, {{"Subject: none", false}, {"", false}, {"Message-ID: <x@y>", false}, {".", false}});
        CHECK(c.result().message_id.empty());
    }
    {
        ContentReader c(false, 100000);
        const std::string id = "<" + std::string(2000, 'x') + "@y>";
        feed(c, {{"Message-ID: " + id, false}, {"", false}, {".", false}});
        CHECK(c.result().message_id == id.substr(0, smx::smtps::max_message_id));
    }
}

TEST_CASE("lines over 998 octets are stored broken by CRLF SPACE, as SMTPC would send them") {
    const std::string line(2500, 'x');
    const std::string exact(998, 'y');
    ContentReader c(false, 1 << 20);
    // The long line comes in pieces, as LineReader cuts it at its limit.
    std::string out;
    for (std::size_t at = 0; at < line.size(); at += 700) {
        Line l;
        l.text = std::string_view(line).substr(at, 700);
        l.complete = at + 700 >= line.size();
        c.feed(l, [&](std::string_view b) { out.append(b); });
    }
    out += feed(c, {{exact, false}, {".", false}});
    CHECK(out == line.substr(0, 998) + "\r\n " + line.substr(998, 997) + "\r\n " + line.substr(1995) +
                     "\r\n" + exact + "\r\n");
    CHECK_FALSE(c.result().too_big);
}
