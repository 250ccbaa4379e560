// A local message as the sendmail command makes it (sendmail/message.hpp):
// line ends, the end of input, the headers added and removed, -t.
#include "sendmail/message.hpp"

#include <catch2/catch.hpp>

using namespace smx::sendmail;

namespace {

Local local() {
    Local l;
    l.sender = "alice@host.example";
    l.login_address = "alice@host.example";
    l.fullname = "Alice Liddell";
    l.hostname = "host.example";
    l.now_us = 1'795'374'022'000'000;  // Sun, 22 Nov 2026 19:00:22 +0000
    l.random = "0123456789abcdef";
    return l;
}

std::vector<std::string> lines_of(std::string_view input, bool ignore_dots = false,
                                  std::uint64_t max = 1 << 20) {
    Collector c(max);
    c.bytes(input, ignore_dots);
    c.end_of_input();
    return c.lines();
}

} // namespace

TEST_CASE("LF, CRLF and a bare CR each end a line; a last line without one counts", "[sendmail]") {
    CHECK(lines_of("a\nb\r\nc\rd") == std::vector<std::string>{"a", "b", "c", "d"});
    CHECK(lines_of("a\r") == std::vector<std::string>{"a"});
    CHECK(lines_of("a\r\r\n") == std::vector<std::string>{"a", ""});
    CHECK(lines_of("").empty());
    // However the input is cut into reads.
    const std::string in = "Subject: x\r\n\r\nbody\r\nmore\n";
    for (std::size_t cut = 0; cut <= in.size(); ++cut) {
        Collector c(1 << 20);
        c.bytes(std::string_view(in).substr(0, cut), false);
        c.bytes(std::string_view(in).substr(cut), false);
        c.end_of_input();
        CHECK(c.lines() == std::vector<std::string>{"Subject: x", "", "body", "more"});
    }
}

TEST_CASE("a lone dot ends the message unless -i", "[sendmail]") {
    Collector c(1 << 20);
    CHECK(c.bytes("a\n.\nafter\n", false));
    c.end_of_input();
    CHECK(c.lines() == std::vector<std::string>{"a"});
    CHECK(lines_of("a\n.\nafter\n", true) == std::vector<std::string>{"a", ".", "after"});
    CHECK(lines_of("a\n..\n.x\n") == std::vector<std::string>{"a", "..", ".x"});
    CHECK(lines_of("a\r\n.\r\n") == std::vector<std::string>{"a"});
}

TEST_CASE("the size counts every line and its CRLF; past it nothing more is kept", "[sendmail]") {
    Collector c(10);
    c.bytes("12345678\n", false);  // 10 with CRLF
    CHECK_FALSE(c.too_big());
    c.bytes("x", false);
    c.end_of_input();
    CHECK(c.too_big());
    CHECK(c.size() == 13);
    CHECK(c.lines() == std::vector<std::string>{"12345678"});
    // One endless line is counted, not kept.
    Collector big(100);
    big.bytes(std::string(1 << 20, 'a'), false);
    big.end_of_input();
    CHECK(big.too_big());
    CHECK(big.lines().empty());
}

TEST_CASE("From:, Date: and Message-ID: are added when missing", "[sendmail]") {
    const Prepared p = prepare({"Subject: hi", "", "body"}, local(), false);
    CHECK(p.content ==
          "Subject: hi\r\n"
          "From: Alice Liddell <alice@host.example>\r\n"
          "Date: Sun, 22 Nov 2026 19:00:22 +0000\r\n"
          "Message-ID: <20261122190022.0123456789abcdef@host.example>\r\n"
          "\r\n"
          "body\r\n");
    const Prepared kept = prepare({"from: Bob <bob@x.y>", "DATE: yesterday", "Message-Id: <1@x>", "", "b"},
                                  local(), false);
    CHECK(kept.content == "from: Bob <bob@x.y>\r\nDATE: yesterday\r\nMessage-Id: <1@x>\r\n\r\nb\r\n");
    Local plain = local();
    plain.fullname.clear();
    CHECK(prepare({}, plain, false).content.starts_with("From: alice@host.example\r\nDate: "));
}

TEST_CASE("a body without headers gets them, and the empty line between", "[sendmail]") {
    const Prepared p = prepare({"hello world", "second line"}, local(), false);
    CHECK(p.content.starts_with("From: Alice Liddell <alice@host.example>\r\n"));
    CHECK(p.content.ends_with(">\r\n\r\nhello world\r\nsecond line\r\n"));
    // An mbox separator goes; a continuation belongs to its field.
    const Prepared mbox = prepare({"From alice Sun Nov 22 19:00:22 2026", "Subject: a", " b", "", "x"},
                                  local(), false);
    CHECK(mbox.content.starts_with("Subject: a\r\n b\r\nFrom: "));
}

TEST_CASE("-t: To, Cc and Bcc; Bcc removed always", "[sendmail]") {
    const Prepared p = prepare({"To: Bob <bob@x.example>, carol@y.example (Carol)",
                                "Cc: \"Doe, John\" <john@z.example>,",
                                "  dave@z.example",
                                "Bcc: secret@w.example",
                                "Subject: s", "", "body"},
                               local(), true);
    CHECK(p.header_rcpts == std::vector<std::string>{"bob@x.example", "carol@y.example",
                                                     "john@z.example", "dave@z.example",
                                                     "secret@w.example"});
    CHECK(p.content.find("Bcc") == std::string::npos);
    CHECK(p.content.find("secret") == std::string::npos);
    CHECK(p.content.starts_with("To: Bob <bob@x.example>, carol@y.example (Carol)\r\nCc: "));
    // Without -t the headers name nobody, and Bcc: still goes.
    const Prepared q = prepare({"To: a@b.c", "bcc: x@y.z", "", "b"}, local(), false);
    CHECK(q.header_rcpts.empty());
    CHECK(q.content.find("x@y.z") == std::string::npos);
}

TEST_CASE("-t with Resent- headers takes those", "[sendmail]") {
    const Prepared p = prepare({"To: old@x.example", "Resent-To: new@y.example", "Resent-Bcc: hid@z.example",
                                "", "b"},
                               local(), true);
    CHECK(p.header_rcpts == std::vector<std::string>{"new@y.example", "hid@z.example"});
    CHECK(p.content.find("hid@") == std::string::npos);
}

TEST_CASE("address lists: groups, comments, quotes, routes", "[sendmail]") {
    CHECK(address_list("undisclosed-recipients:;").empty());
    CHECK(address_list("friends: a@x.y, B <b@x.y>;, c@x.y") ==
          std::vector<std::string>{"a@x.y", "b@x.y", "c@x.y"});
    CHECK(address_list("\"a, b\" <ab@x.y> (comment, with comma)") ==
          std::vector<std::string>{"ab@x.y"});
    CHECK(address_list("<@relay.example:user@x.y>") == std::vector<std::string>{"user@x.y"});
    CHECK(address_list(" plain@x.y ") == std::vector<std::string>{"plain@x.y"});
    CHECK(address_list("\"quoted local\"@x.y") == std::vector<std::string>{"\"quoted local\"@x.y"});
    CHECK(address_list("root") == std::vector<std::string>{"root"});
    CHECK(address_list(", ,").empty());
}

TEST_CASE("a full name that is not a plain phrase is quoted, never a line break", "[sendmail]") {
    CHECK(display_name("Alice Liddell") == "Alice Liddell");
    CHECK(display_name("Cron Daemon") == "Cron Daemon");
    CHECK(display_name("O'Brien, Pat") == "\"O'Brien, Pat\"");
    CHECK(display_name("say \"hi\"") == "\"say \\\"hi\\\"\"");
    CHECK(display_name("evil\r\nBcc: x@y.z") == "\"evil  Bcc: x@y.z\"");
}
