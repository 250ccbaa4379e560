#include "libsm/milter_protocol.hpp"

#include <catch2/catch.hpp>

using namespace smx::milter;
using namespace std::string_literals;

namespace {
// A packet as libmilter frames it: length (command + data), command, data.
std::string packet(char cmd, const std::string& data) {
    const std::uint32_t len = static_cast<std::uint32_t>(data.size() + 1);
    std::string out;
    out.push_back(static_cast<char>(len >> 24));
    out.push_back(static_cast<char>(len >> 16));
    out.push_back(static_cast<char>(len >> 8));
    out.push_back(static_cast<char>(len));
    out.push_back(cmd);
    return out + data;
}

std::string u32(std::uint32_t v) {
    return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
            static_cast<char>(v)};
}

Reply decoded(char code, const std::string& data) {
    Reply r;
    const auto err = decode_reply(code, data, r);
    INFO(err);
    REQUIRE(err.empty());
    return r;
}

std::string error_of(char code, const std::string& data) {
    Reply r;
    return decode_reply(code, data, r);
}
} // namespace

TEST_CASE("milter commands are framed as libmilter reads them", "[milter]") {
    std::string out;
    put_optneg(out, 6, action::all, step::v6);
    CHECK(out == packet('O', u32(6) + u32(0x1ff) + u32(step::v6)));

    out.clear();
    auto at = begin_macros(out, Cmd::connect);
    put_macro(out, "j", "mx.example");
    put_macro(out, "client_addr", "192.0.2.1");
    put_macro(out, "{if_addr}", "192.0.2.2");
    end_macros(out, at);
    CHECK(out == packet('D', "Cj\0mx.example\0{client_addr}\0" "192.0.2.1\0{if_addr}\0" "192.0.2.2\0"s));
    // No macro: no packet.
    at = begin_macros(out, Cmd::helo);
    end_macros(out, at);
    CHECK(out == packet('D', "Cj\0mx.example\0{client_addr}\0" "192.0.2.1\0{if_addr}\0" "192.0.2.2\0"s));

    out.clear();
    put_connect(out, "[192.0.2.1]", Family::inet, 2525, "192.0.2.1");
    CHECK(out == packet('C', "[192.0.2.1]\0" "4\x09\xdd" "192.0.2.1\0"s));

    out.clear();
    put_connect(out, "localhost", Family::unknown, 0, "");
    CHECK(out == packet('C', "localhost\0U"s));

    out.clear();
    put_helo(out, "client.example");
    const std::vector<std::string> mail = {"<a@example.org>", "SIZE=10"};
    put_mail(out, mail);
    const std::vector<std::string> rcpt = {"<b@example.net>"};
    put_rcpt(out, rcpt);
    put_header(out, "Subject", " hi");
    put_header(out, "To", "a,\r\n\tb\rc");
    put_body(out, "line\r\n");
    put_unknown(out, "XYZZY");
    put_bare(out, Cmd::eob);
    CHECK(out == packet('H', "client.example\0"s) + packet('M', "<a@example.org>\0SIZE=10\0"s) +
                     packet('R', "<b@example.net>\0"s) + packet('L', "Subject\0 hi\0"s) +
                     packet('L', "To\0a,\n\tb\rc\0"s) +
                     packet('B', "line\r\n") + packet('U', "XYZZY\0"s) + packet('E', ""));
}

TEST_CASE("milter packet length is bounded", "[milter]") {
    CHECK(read_frame({0, 0, 0, 5}, 100).error.empty());
    CHECK(read_frame({0, 0, 0, 5}, 100).length == 5);
    CHECK(read_frame({0, 0, 0, 100}, 100).error.empty());
    CHECK(read_frame({0, 0, 0, 101}, 100).error == "unreasonable packet length: 101 > 100");
    CHECK(read_frame({0, 0, 0, 0}, 100).error == "bad packet length: 0");
    CHECK(!read_frame({0xff, 0xff, 0xff, 0xff}, default_max_packet).error.empty());
}

TEST_CASE("milter option negotiation", "[milter]") {
    Negotiated n;
    SECTION("a v6 milter with no-reply steps and macro lists") {
        const auto data = u32(6) + u32(action::add_headers | action::change_body) +
                          u32(step::no_helo | step::nr_rcpt | step::skip) +
                          u32(2) + "{mail_addr} i\0"s + u32(5) + "{rcpt_addr},j\0"s +
                          u32(99) + "x\0"s;
        REQUIRE(decode_optneg(data, 6, action::all, n).empty());
        CHECK(n.version == 6);
        CHECK(n.actions == 3);
        CHECK_FALSE(n.wants(Cmd::helo));
        CHECK(n.wants(Cmd::rcpt));
        CHECK(n.no_reply(Cmd::rcpt));
        CHECK_FALSE(n.no_reply(Cmd::mail));
        CHECK(n.wants(Cmd::eob));
        CHECK_FALSE(n.macros[0]);
        REQUIRE(n.macros[2]);
        CHECK(*n.macros[2] == std::vector<std::string>{"{mail_addr}", "i"});
        REQUIRE(n.macros[5]);
        CHECK(*n.macros[5] == std::vector<std::string>{"{rcpt_addr}", "j"});
    }
    SECTION("a v2 milter is not sent DATA, UNKNOWN and gets no no-reply steps") {
        REQUIRE(decode_optneg(u32(2) + u32(0) + u32(step::nr_rcpt), 6, action::all, n).empty());
        CHECK_FALSE(n.wants(Cmd::data));
        CHECK_FALSE(n.wants(Cmd::unknown));
        CHECK(n.wants(Cmd::eoh));
        CHECK_FALSE(n.no_reply(Cmd::rcpt));
    }
    SECTION("leading space in header values") {
        REQUIRE(decode_optneg(u32(6) + u32(0) + u32(step::header_leadspace), 6, action::all, n)
                    .empty());
        CHECK((n.steps & step::header_leadspace) != 0);
    }
    SECTION("errors") {
        CHECK(decode_optneg(u32(6) + u32(0), 6, action::all, n) ==
              "SMFIC_OPTNEG: packet too short");
        CHECK(decode_optneg(u32(7) + u32(0) + u32(0), 6, action::all, n) ==
              "protocol version 7 conflict with MTA protocol version 6");
        CHECK(decode_optneg(u32(1) + u32(0) + u32(0), 6, action::all, n) != "");
        CHECK(decode_optneg(u32(6) + u32(0x200) + u32(0), 6, action::all, n) ==
              "request mask 512 conflict with MTA request mask 511");
        CHECK(decode_optneg(u32(6) + u32(0) + u32(0) + u32(1) + "j", 6, action::all, n) ==
              "SMFIC_OPTNEG: bad macro list");
    }
}

TEST_CASE("milter replies without data", "[milter]") {
    CHECK(decoded('c', "").act == Act::cont);
    CHECK(decoded('a', "").act == Act::accept);
    CHECK(decoded('r', "").act == Act::reject);
    CHECK(decoded('t', "").act == Act::tempfail);
    CHECK(decoded('d', "").act == Act::discard);
    CHECK(decoded('s', "").act == Act::skip);
    CHECK(decoded('p', "").act == Act::progress);
    CHECK(error_of('c', "x") == "SMFIR_CONTINUE followed by 1 data octets");
    CHECK(error_of('Z', "") == "unexpected unknown reply 'Z'");
    CHECK(error_of('\x01', "") == "unexpected unknown reply 1");
    CHECK(error_of('l', "") == "unexpected SMFIR_SETSYMLIST");
    CHECK(is_final(Act::cont));
    CHECK(is_final(Act::replycode));
    CHECK_FALSE(is_final(Act::addheader));
    CHECK_FALSE(is_final(Act::progress));
}

TEST_CASE("milter reply codes, one line and several", "[milter]") {
    auto r = decoded('y', "550 5.7.1 go away\0"s);
    CHECK(r.code == 550);
    CHECK(r.lines == std::vector<std::string>{"5.7.1 go away"});

    r = decoded('y', "451-4.7.1 first\r\n451-4.7.1 second\r\n451 4.7.1 last\0"s);
    CHECK(r.code == 451);
    CHECK(r.lines == std::vector<std::string>{"4.7.1 first", "4.7.1 second", "4.7.1 last"});

    r = decoded('y', "554\0"s);
    CHECK(r.code == 554);
    CHECK(r.lines == std::vector<std::string>{""});

    CHECK(error_of('y', "250 ok\0"s) == "SMFIR_REPLYCODE: code 250 is not 4XX or 5XX");
    CHECK(error_of('y', "599 x\0"s) == "SMFIR_REPLYCODE: code 599 is not 4XX or 5XX");
    CHECK(error_of('y', "55\0"s) == "SMFIR_REPLYCODE: no reply code");
    CHECK(error_of('y', "5x0 a\0"s) == "SMFIR_REPLYCODE: no reply code");
    CHECK(error_of('y', "550 a") == "SMFIR_REPLYCODE: not one string");
    CHECK(error_of('y', "550 a\0b"s) == "SMFIR_REPLYCODE: not one string");
    CHECK(error_of('y', "550-a\r\n450 b\0"s) == "SMFIR_REPLYCODE: line without code 550");
    CHECK(error_of('y', "550 a\r\n550 b\0"s) ==
          "SMFIR_REPLYCODE: continuation marks out of step");
    CHECK(error_of('y', "550-a\0"s) == "SMFIR_REPLYCODE: continuation marks out of step");
    CHECK(error_of('y', "550xa\0"s) == "SMFIR_REPLYCODE: no space or hyphen after the code");
}

TEST_CASE("milter end-of-message edits", "[milter]") {
    auto r = decoded('h', "X-Spam\0yes\0"s);
    CHECK((r.act == Act::addheader && r.name == "X-Spam" && r.value == "yes"));

    r = decoded('i', u32(0) + "DKIM-Signature\0v=1;\r\n\tb=x\0"s);
    CHECK((r.act == Act::insheader && r.index == 0 && r.value == "v=1;\r\n\tb=x"));

    r = decoded('m', u32(2) + "Subject\0\0"s);
    CHECK((r.act == Act::chgheader && r.index == 2 && r.name == "Subject" && r.value.empty()));

    r = decoded('+', "<new@example.net>\0"s);
    CHECK((r.act == Act::addrcpt && r.addr == "<new@example.net>" && r.args.empty()));

    r = decoded('2', "<new@example.net>\0NOTIFY=NEVER\0"s);
    CHECK((r.act == Act::addrcpt_par && r.args == "NOTIFY=NEVER"));
    r = decoded('2', "<new@example.net>\0"s);
    CHECK(r.args.empty());

    r = decoded('-', "<old@example.net>\0"s);
    CHECK((r.act == Act::delrcpt && r.addr == "<old@example.net>"));

    r = decoded('e', "<>\0"s);
    CHECK((r.act == Act::chgfrom && r.addr == "<>"));
    r = decoded('e', "<s@example.org>\0SIZE=5 BODY=8BITMIME\0"s);
    CHECK(r.args == "SIZE=5 BODY=8BITMIME");

    r = decoded('b', "new body\r\n\0binary"s);
    CHECK((r.act == Act::replbody && r.text == "new body\r\n\0binary"s));

    r = decoded('q', "spam score 99\0"s);
    CHECK((r.act == Act::quarantine && r.text == "spam score 99"));

    CHECK(error_of('h', "X-Spam\0"s) == "SMFIR_ADDHEADER: packet too short");
    CHECK(error_of('h', "\0v\0"s) == "SMFIR_ADDHEADER: empty header name");
    CHECK(error_of('h', "X Y\0v\0"s) == "SMFIR_ADDHEADER: bad header name");
    CHECK(error_of('h', "X:Y\0v\0"s) == "SMFIR_ADDHEADER: bad header name");
    CHECK(error_of('i', "\0\0\0"s) == "SMFIR_INSHEADER: packet too short");
    CHECK(error_of('m', u32(1) + "A\0b\0c"s) == "SMFIR_CHGHEADER: packet too short");
    CHECK(error_of('+', "") == "SMFIR_ADDRCPT: not one string");
    CHECK(error_of('+', "\0"s) == "SMFIR_ADDRCPT: empty address");
    CHECK(error_of('-', "a\0b\0"s) == "SMFIR_DELRCPT: not one string");
    CHECK(error_of('2', "a\0b"s) == "SMFIR_ADDRCPT_PAR: arguments without NUL");
    CHECK(error_of('2', "a\0b\0c"s) == "SMFIR_ADDRCPT_PAR: data after the arguments");
    CHECK(error_of('e', "") == "SMFIR_CHGFROM: no address");
    CHECK(error_of('q', "x") == "SMFIR_QUARANTINE: not one string");
}

TEST_CASE("milter names for logs", "[milter]") {
    CHECK(name(Cmd::eob) == "SMFIC_BODYEOB");
    CHECK(name(Cmd::rcpt) == "SMFIC_RCPT");
    CHECK(name('y') == "SMFIR_REPLYCODE");
}
