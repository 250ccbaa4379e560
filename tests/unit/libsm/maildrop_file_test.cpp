// The maildrop file codec (libsm/maildrop_file.hpp): what smx-postdrop and
// smx-pickup accept of what a local user wrote.
#include "libsm/maildrop_file.hpp"
#include "libsm/messages.hpp"
#include "libsm/record.hpp"

#include <catch2/catch.hpp>

using namespace smx::maildrop;

namespace {

Envelope sample() {
    Envelope e;
    e.uid = 1000;
    e.arrival_us = 1'795'374'022'000'000;
    e.sender = "alice@example.org";
    e.rcpts = {"bob@example.net", "carol@example.net"};
    e.content_size = 42;
    return e;
}

std::optional<Envelope> decode_all(const std::string& bytes, Kind kind, std::string& err) {
    const auto n = fields_length(bytes, err);
    if (!n) return std::nullopt;
    REQUIRE(prefix_size + *n == bytes.size());
    return decode(std::string_view(bytes).substr(prefix_size), kind, err);
}

// A file whose fields are these, as a hand-made one would be.
std::string with_fields(const smx::rec::Writer& w) {
    std::string out(magic);
    out += smx::rec::put_u32(static_cast<std::uint32_t>(w.fields().size()));
    out += w.fields();
    return out;
}

} // namespace

TEST_CASE("a maildrop file round-trips, with its uid and time", "[maildrop]") {
    const Envelope e = sample();
    std::string err;
    const auto d = decode_all(encode(e, Kind::file), Kind::file, err);
    REQUIRE(d);
    CHECK(d->uid == 1000);
    CHECK(d->arrival_us == e.arrival_us);
    CHECK(d->sender == e.sender);
    CHECK(d->rcpts == e.rcpts);
    CHECK(d->content_size == 42);
}

TEST_CASE("a submission carries no uid, and a file must", "[maildrop]") {
    std::string err;
    const std::string submission = encode(sample(), Kind::submission);
    REQUIRE(decode_all(submission, Kind::submission, err));
    // smx-postdrop takes the uid from getuid(): a submission naming one is refused.
    CHECK_FALSE(decode_all(encode(sample(), Kind::file), Kind::submission, err));
    CHECK(err == "a uid or time in a submission");
    CHECK_FALSE(decode_all(submission, Kind::file, err));
    CHECK(err == "no uid or time");
}

TEST_CASE("the null sender is allowed, no recipient is not", "[maildrop]") {
    Envelope e = sample();
    e.sender.clear();
    std::string err;
    REQUIRE(decode_all(encode(e, Kind::file), Kind::file, err));
    e.rcpts.clear();
    CHECK_FALSE(decode_all(encode(e, Kind::file), Kind::file, err));
    CHECK(err == "no recipients");
}

TEST_CASE("addresses are checked as SMTPS checks them, ASCII only", "[maildrop]") {
    const std::vector<std::string> bad_ones{
        "bob", "bob@", "a b@example.net", "bob@example.net\r\nRCPT TO:<x@y>", "<bob@example.net>",
        "b\xc3\xa4r@example.net", std::string(250, 'a') + "@x.de"};
    for (const std::string& bad : bad_ones) {
        Envelope e = sample();
        e.rcpts = {bad};
        std::string err;
        CHECK_FALSE(decode_all(encode(e, Kind::file), Kind::file, err));
        CHECK(err == "invalid recipient address");
        e = sample();
        e.sender = bad;
        CHECK_FALSE(decode_all(encode(e, Kind::file), Kind::file, err));
        CHECK(err == "invalid sender address");
    }
}

TEST_CASE("unknown, repeated, mistyped and truncated fields are refused", "[maildrop]") {
    std::string err;
    smx::rec::Writer w;
    w.u32(1, 1000).u64(2, 1).str(3, "a@b.c").str(4, "d@e.f").u64(5, 3).str(9, "x");
    CHECK_FALSE(decode_all(with_fields(w), Kind::file, err));
    CHECK(err == "unknown field 9");
    smx::rec::Writer twice;
    twice.u32(1, 1000).u32(1, 0).u64(2, 1).str(3, "a@b.c").str(4, "d@e.f").u64(5, 3);
    CHECK_FALSE(decode_all(with_fields(twice), Kind::file, err));
    CHECK(err == "duplicate uid");
    smx::rec::Writer narrow;
    narrow.u64(1, 1000).u64(2, 1).str(3, "a@b.c").str(4, "d@e.f").u64(5, 3);
    CHECK_FALSE(decode_all(with_fields(narrow), Kind::file, err));
    CHECK(err == "bad uid");
    const std::string whole = encode(sample(), Kind::file);
    std::string cut = whole.substr(0, whole.size() - 3);
    cut.replace(magic.size(), 4, smx::rec::put_u32(static_cast<std::uint32_t>(cut.size() - prefix_size)));
    CHECK_FALSE(decode_all(cut, Kind::file, err));
    CHECK(err == "truncated field");
}

TEST_CASE("the prefix names the format and bounds the envelope", "[maildrop]") {
    std::string err;
    CHECK_FALSE(fields_length("SMXDROP2\0\0\0\0", err));
    CHECK_FALSE(fields_length(std::string("SMXDROP2\0\0\0\0", 12), err));
    CHECK(err == "unknown format version");
    CHECK_FALSE(fields_length(std::string("From alice\n\0", 12), err));
    CHECK(err == "not a maildrop file");
    std::string huge(magic);
    huge += smx::rec::put_u32(static_cast<std::uint32_t>(max_fields() + 1));
    CHECK_FALSE(fields_length(huge, err));
    CHECK(err.starts_with("envelope of "));
    std::string most(magic);
    most += smx::rec::put_u32(static_cast<std::uint32_t>(max_fields()));
    CHECK(fields_length(most, err) == max_fields());
    CHECK(max_fields() == smx::msg::max_envelope);
}

TEST_CASE("content must have CRLF line ends only, however it is cut", "[maildrop]") {
    auto verdict = [](std::string_view content, std::size_t cut) {
        ContentCheck c;
        c.feed(content.substr(0, cut));
        c.feed(content.substr(cut));
        return c.finish();
    };
    const std::string good = "Subject: x\r\n\r\nbody\r\n";
    for (std::size_t cut = 0; cut <= good.size(); ++cut) CHECK(verdict(good, cut).empty());
    CHECK(verdict("", 0).empty());
    for (const std::string bad : {"a\nb\r\n", "a\rb\r\n", "a\r\r\n", "a\r\n\n", "\n"})
        for (std::size_t cut = 0; cut <= bad.size(); ++cut)
            CHECK(verdict(bad, cut) == "a bare CR or LF in the content");
    CHECK(verdict("a\r\nb", 2) == "content that does not end in CRLF");
    CHECK(verdict("a\r\nb\r", 2) == "a bare CR or LF in the content");
    ContentCheck eight;
    eight.feed("caf\xc3\xa9\r\n");
    CHECK(eight.eight_bit());
    ContentCheck seven;
    seven.feed(good);
    CHECK_FALSE(seven.eight_bit());
}

TEST_CASE("maildrop names: what postdrop writes, what pickup renames them to", "[maildrop]") {
    const std::string r = random_part();
    CHECK(r.size() == 32);
    CHECK(r != random_part());
    CHECK(valid_name("t" + r));
    CHECK(valid_name("m" + r));
    CHECK(valid_name("p6B05B3564B3F00000"));
    CHECK_FALSE(valid_name("p6b05b3564b3f00000"));
    CHECK_FALSE(valid_name("m" + r + "x"));
    CHECK_FALSE(valid_name("x" + r));
    CHECK_FALSE(valid_name("m../../etc"));
    CHECK_FALSE(valid_name(""));
}
