#include "libsm/ids.hpp"
#include "libsm/messages.hpp"
#include "libsm/record.hpp"

#include <catch2/catch.hpp>
#include <random>

using namespace smx;

namespace {
rec::Frame to_frame(const std::string& wire) {
    auto h = rec::parse_header(wire);
    REQUIRE(h);
    REQUIRE(wire.size() == rec::header_size + h->length);
    return {*h, wire.substr(rec::header_size)};
}

msg::TaCommit sample_commit() {
    msg::TaCommit t;
    t.ta_id = "6740A1B2C3D4E0001";
    t.client_addr = "127.0.0.1";
    t.client_name = "localhost";
    t.helo = "client.example";
    t.sender = "a@example.org";
    t.params = "SIZE=100 BODY=8BITMIME";
    t.rcpts = {{"x@example.net", ""}, {"y@example.net", "NOTIFY=NEVER"}};
    t.content_id = t.ta_id;
    t.size = 1234;
    t.arrival_us = 1700000000123456ull;
    return t;
}
} // namespace

TEST_CASE("TA_COMMIT round trip keeps every field") {
    const auto t = sample_commit();
    const auto f = to_frame(msg::encode(t, 42));
    CHECK(f.hdr.type == msg::TA_COMMIT);
    CHECK(f.hdr.req_id == 42);
    std::string err;
    auto d = msg::decode<msg::TaCommit>(f, err);
    REQUIRE(d);
    CHECK(d->ta_id == t.ta_id);
    CHECK(d->helo == t.helo);
    CHECK(d->sender == t.sender);
    CHECK(d->params == t.params);
    REQUIRE(d->rcpts.size() == 2);
    CHECK(d->rcpts[1].addr == "y@example.net");
    CHECK(d->rcpts[1].params == "NOTIFY=NEVER");
    CHECK(d->size == 1234);
    CHECK(d->arrival_us == t.arrival_us);
}

TEST_CASE("envelope_size is what the sender, parameters, HELO and recipients add to a TA_COMMIT") {
    const auto t = sample_commit();
    auto bare = t;
    bare.sender.clear();
    bare.params.clear();
    bare.helo.clear();
    bare.rcpts.clear();
    CHECK(msg::envelope_bytes(t).size() - msg::envelope_bytes(bare).size() ==
          msg::envelope_size(t.sender, t.params, t.helo, t.rcpts));
    CHECK(msg::recipients_size(t.rcpts) ==
          msg::envelope_size("", "", "", t.rcpts));
    CHECK(msg::envelope_size(t.sender, t.params, t.helo) ==
          t.sender.size() + t.params.size() + t.helo.size());
}

TEST_CASE("DELIVER and RESULT round trip") {
    msg::Deliver dl{7, "6740A1B2C3D4E0001", "6740A1B2C3D4E0001", "", 99,
                    {{0, "x@example.net", ""}, {3, "z@example.net", "NOTIFY=SUCCESS ORCPT=rfc822;z+40x"}},
                    {"[127.0.0.1]:2600"}, "BODY=8BITMIME RET=HDRS"};
    std::string err;
    auto d = msg::decode<msg::Deliver>(to_frame(msg::encode(dl)), err);
    REQUIRE(d);
    CHECK(d->sender.empty());
    CHECK(d->rcpts[1].idx == 3);
    CHECK(d->nexthops == dl.nexthops);
    CHECK(d->params == "BODY=8BITMIME RET=HDRS");
    CHECK(d->rcpts[0].params.empty());
    CHECK(d->rcpts[1].params == "NOTIFY=SUCCESS ORCPT=rfc822;z+40x");

    msg::Result r{7, "sink[127.0.0.1]:2600", {{0, 250, "2.0.0", "Ok"}, {3, 451, "4.3.0", "later"}}};
    auto rr = msg::decode<msg::Result>(to_frame(msg::encode(r)), err);
    REQUIRE(rr);
    CHECK(rr->rcpts[1].code == 451);
    CHECK(rr->rcpts[1].text == "later");
    CHECK_FALSE(rr->peer_dsn);
    r.peer_dsn = true;
    CHECK(msg::decode<msg::Result>(to_frame(msg::encode(r)), err)->peer_dsn);
    CHECK(msg::to_string(r.rcpts[1].reply()) == "451 4.3.0 later");
    CHECK(msg::to_string({0, "4.4.1", "connect refused"}) == "4.4.1 connect refused");
    CHECK(msg::to_string({0, "", "no route"}) == "no route");
}

TEST_CASE("SMTPS_LOAD round trip, every count required") {
    const msg::SmtpsLoad l{3, 50000, 100, 12};
    std::string err;
    auto d = msg::decode<msg::SmtpsLoad>(to_frame(msg::encode(l)), err);
    REQUIRE(d);
    CHECK(*d == l);
    // Without its waiting count (the last field: a type and a length, then 8 bytes).
    std::string wire = msg::encode(l);
    auto frame = to_frame(wire);
    frame.body.resize(frame.body.size() - 14);
    CHECK_FALSE(msg::decode<msg::SmtpsLoad>(frame, err));
    CHECK_FALSE(msg::decode<msg::SmtpsLoad>(to_frame(msg::encode(msg::TaAck{"A", msg::AckStatus::ok, ""}, 1)), err));
}

TEST_CASE("SMTPS_LOAD carries refusal counts; a reason or class it does not know is an error") {
    msg::SmtpsLoad l{0, 1, 0, 0};
    l.rejected = {{smx::Rejection::relay_denied, 5, 3}, {smx::Rejection::timeout, 4, 1}};
    std::string err;
    auto d = msg::decode<msg::SmtpsLoad>(to_frame(msg::encode(l)), err);
    REQUIRE(d);
    CHECK(*d == l);
    // What a newer (or hostile) peer might send: encode() does not check.
    for (auto [reason, cls] : {std::pair{smx::rejection_reasons, 5u}, std::pair{std::size_t{0}, 3u}}) {
        msg::SmtpsLoad bad{0, 1, 0, 0};
        bad.rejected = {{static_cast<smx::Rejection>(reason), cls, 1}};
        CHECK_FALSE(msg::decode<msg::SmtpsLoad>(to_frame(msg::encode(bad)), err));
    }
}

TEST_CASE("SMTPS_LOAD carries milter failure counts by default action") {
    msg::SmtpsLoad l{0, 1, 0, 0};
    l.milter_failures = {2, 0, 0, 7};
    std::string err;
    auto d = msg::decode<msg::SmtpsLoad>(to_frame(msg::encode(l)), err);
    REQUIRE(d);
    CHECK(*d == l);
    // Without failures the field is left out: the frame is the one before it was added.
    CHECK(msg::encode(msg::SmtpsLoad{0, 1, 0, 0}).size() < msg::encode(l).size());
}

TEST_CASE("ANVIL_REQ and ANVIL_REPLY round trip; an unknown op or an odd client is an error") {
    std::string err;
    const msg::AnvilRequest r{msg::AnvilOp::mail, "2001:db8:1:2::/64", 10, 20};
    auto d = msg::decode<msg::AnvilRequest>(to_frame(msg::encode(r, 7)), err);
    REQUIRE(d);
    CHECK(d->op == msg::AnvilOp::mail);
    CHECK(d->client == r.client);
    CHECK(d->mail_limit == 10);
    CHECK(d->rcpt_limit == 20);
    const msg::AnvilReply a{3, 41, true};
    auto b = msg::decode<msg::AnvilReply>(to_frame(msg::encode(a, 7)), err);
    REQUIRE(b);
    CHECK(b->connections == 3);
    CHECK(b->rate == 41);
    CHECK(b->rcpt_granted);
    // What a newer (or hostile) peer might send: encode() does not check.
    CHECK_FALSE(msg::decode<msg::AnvilRequest>(
        to_frame(msg::encode(msg::AnvilRequest{static_cast<msg::AnvilOp>(msg::anvil_ops), "c"})), err));
    CHECK_FALSE(msg::decode<msg::AnvilRequest>(to_frame(msg::encode(msg::AnvilRequest{})), err));
    CHECK_FALSE(msg::decode<msg::AnvilRequest>(
        to_frame(msg::encode(msg::AnvilRequest{msg::AnvilOp::connect,
                                               std::string(msg::max_anvil_client + 1, '1')})),
        err));
}

TEST_CASE("decoder rejects what a strict peer must reject") {
    std::string err;
    SECTION("wrong type") {
        auto f = to_frame(msg::encode(msg::Hello{"smtps", 1, 1}));
        CHECK_FALSE(msg::decode<msg::TaAck>(f, err));
        CHECK(err.find("unexpected record type") != std::string::npos);
    }
    SECTION("missing mandatory field") {
        auto f = to_frame(rec::Writer().str(1, "smtps").frame(msg::HELLO, 0));
        CHECK_FALSE(msg::decode<msg::Hello>(f, err));
        CHECK(err.find("missing tag") != std::string::npos);
    }
    SECTION("unknown mandatory tag") {
        auto f = to_frame(rec::Writer().str(1, "smtps").u32(2, 1).str(999, "x").frame(msg::HELLO, 0));
        CHECK_FALSE(msg::decode<msg::Hello>(f, err));
        CHECK(err.find("unknown mandatory tag") != std::string::npos);
    }
    SECTION("unknown optional tag is skipped") {
        auto f = to_frame(rec::Writer().str(1, "smtps").u32(2, 1)
                              .str(rec::optional_tag | 5, "hint").frame(msg::HELLO, 0));
        CHECK(msg::decode<msg::Hello>(f, err));
    }
    SECTION("integer of the wrong width") {
        auto f = to_frame(rec::Writer().str(1, "smtps").u64(2, 1).frame(msg::HELLO, 0));
        CHECK_FALSE(msg::decode<msg::Hello>(f, err));
    }
    SECTION("duplicate singleton") {
        auto f = to_frame(rec::Writer().str(1, "a").str(1, "b").u32(2, 1).frame(msg::HELLO, 0));
        CHECK_FALSE(msg::decode<msg::Hello>(f, err));
    }
    SECTION("reply code out of range") {
        msg::Result r{1, "", {{0, 999, "", "x"}}};
        CHECK_FALSE(msg::decode<msg::Result>(to_frame(msg::encode(r)), err));
    }
}

TEST_CASE("truncated and oversized frames") {
    const std::string wire = msg::encode(sample_commit(), 1);
    std::string err;
    // Every truncation of the body is rejected, never read past the end.
    for (std::size_t cut = rec::header_size; cut < wire.size(); ++cut) {
        rec::Frame f{*rec::parse_header(wire), wire.substr(rec::header_size, cut - rec::header_size)};
        CHECK_FALSE(msg::decode<msg::TaCommit>(f, err));
    }
    std::string big = wire.substr(0, rec::header_size);
    big.replace(0, 4, rec::put_u32(rec::max_body + 1));
    CHECK_FALSE(rec::parse_header(big));
    CHECK_FALSE(rec::parse_header(big.substr(0, 10)));
}

TEST_CASE("random garbage never crashes the decoder") {
    std::mt19937 rng(12345);
    std::string err;
    const std::string good = msg::encode(sample_commit(), 1);
    for (int i = 0; i < 20000; ++i) {
        std::string body = good.substr(rec::header_size);
        const int flips = 1 + static_cast<int>(rng() % 8);
        for (int k = 0; k < flips; ++k) body[rng() % body.size()] = static_cast<char>(rng());
        if (rng() % 4 == 0) body.resize(rng() % body.size());
        rec::Frame f{{static_cast<std::uint32_t>(body.size()), msg::TA_COMMIT, 0, 1}, body};
        auto d = msg::decode<msg::TaCommit>(f, err);
        if (d) CHECK(!d->rcpts.empty());
    }
}

TEST_CASE("RFC 5322 dates are in UTC with English names") {
    CHECK(smx::rfc5322_date(1'795'374'022'000'000) == "Sun, 22 Nov 2026 19:00:22 +0000");
    CHECK(smx::rfc5322_date(0) == "Thu, 01 Jan 1970 00:00:00 +0000");
}
