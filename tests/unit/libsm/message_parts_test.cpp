// MessageParts on its own: fields, the end of the header and the body, for
// any cut of the input into pieces.
#include "libsm/message_parts.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using smx::MessageParts;

namespace {

struct Parts {
    std::vector<std::string> fields;
    int ends = 0;
    bool blank = false;
    std::string body;
    void header(std::string_view f) { fields.emplace_back(f); }
    void end_of_headers(bool b) {
        ++ends;
        blank = b;
    }
    void body_bytes(std::string_view b) { body.append(b); }
    // What was passed on, put together again.
    std::string joined() const {
        std::string s;
        for (const auto& f : fields) s += f;
        return s + (blank ? "\r\n" : "") + body;
    }
};

struct Sink {
    Parts& p;
    void header(std::string_view f) { p.header(f); }
    void end_of_headers(bool b) { p.end_of_headers(b); }
    void body(std::string_view b) { p.body_bytes(b); }
};

// The input in pieces of `piece` bytes.
Parts split(const std::string& in, std::size_t piece, std::size_t max = 102400) {
    Parts p;
    Sink s{p};
    MessageParts m(max);
    for (std::size_t i = 0; i < in.size(); i += piece) m.feed(std::string_view(in).substr(i, piece), s);
    m.finish(s);
    return p;
}

} // namespace

TEST_CASE("fields, folded lines, the empty line and the body, in any pieces", "[message_parts]") {
    const std::string in =
        "Received: from a\r\n\tby b\r\nSubject: hi\r\n there\r\nX-Empty:\r\n\r\nbody: not a field\r\n\r\nend\r\n";
    for (std::size_t piece : {1u, 2u, 3u, 7u, 1000u}) {
        const Parts p = split(in, piece);
        REQUIRE(p.fields == std::vector<std::string>{"Received: from a\r\n\tby b\r\n",
                                                     "Subject: hi\r\n there\r\n", "X-Empty:\r\n"});
        CHECK(p.ends == 1);
        CHECK(p.blank);
        CHECK(p.body == "body: not a field\r\n\r\nend\r\n");
        CHECK(p.joined() == in);
    }
}

TEST_CASE("a line that is no field ends the header without an empty line", "[message_parts]") {
    for (const std::string& first : std::vector<std::string>{"no colon here\r\n", ": no name\r\n",
                                                         "Bad Name: x\r\n", "\rx\r\n"}) {
        const std::string in = "A: 1\r\n" + first + "B: 2\r\n";
        const Parts p = split(in, 1);
        CHECK(p.fields == std::vector<std::string>{"A: 1\r\n"});
        CHECK(p.ends == 1);
        CHECK_FALSE(p.blank);
        CHECK(p.body == first + "B: 2\r\n");
        CHECK(p.joined() == in);
    }
    // A folded line with no field before it.
    const Parts p = split("\tfolded first\r\nA: 1\r\n", 1);
    CHECK(p.fields.empty());
    CHECK(p.body == "\tfolded first\r\nA: 1\r\n");
}

TEST_CASE("a header past the limit: the field under way and the rest are body, nothing lost", "[message_parts]") {
    const std::string in = "A: 1\r\nB: " + std::string(200, 'b') + "\r\nC: 3\r\n\r\nbody\r\n";
    for (std::size_t piece : {1u, 50u, 1000u}) {
        const Parts p = split(in, piece, 100);
        CHECK(p.fields == std::vector<std::string>{"A: 1\r\n"});
        CHECK_FALSE(p.blank);
        CHECK(p.joined() == in);
    }
    // A name that never ends within the limit is no field.
    const std::string name = std::string(300, 'n') + ": v\r\n\r\n";
    const Parts p = split(name, 1, 100);
    CHECK(p.fields.empty());
    CHECK(p.joined() == name);
}

TEST_CASE("content that ends inside the header", "[message_parts]") {
    for (const std::string& in :
         std::vector<std::string>{"A: 1\r\nB: 2\r\n", "A: 1\r\n\r", "A: 1\r\nPartial"}) {
        const Parts p = split(in, 1);
        CHECK(p.ends == 1);
        CHECK(p.joined() == in);
    }
    const Parts empty = split("", 1);
    CHECK(empty.ends == 1);
    CHECK(empty.joined().empty());
}
