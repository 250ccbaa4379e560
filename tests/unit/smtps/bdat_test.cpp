// BDAT (RFC 3030) sessions over real TCP against a fake QMGR.
#include "tests/unit/smtps/harness.hpp"

#include <catch2/catch.hpp>

using namespace smtps_test;

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

void envelope(Client& c) {
    REQUIRE(starts(c.reply(), "220 "));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250-mx.test"));
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
}

// A BDAT command and its octets (cmd() would add a CRLF to them).
std::string chunk(Client& c, const std::string& bdat, const std::string& octets) {
    c.send(bdat + "\r\n" + octets);
    return c.reply();
}

// The message as stored, without the Received: header SMTPS put first.
std::string stored(Harness& h, const std::string& reply) {
    const std::string f = read_file(h.content_path(queued_id(reply)));
    const auto end = f.find("\r\n", f.find("\r\n\tfor ") + 2);
    return f.substr(end + 2);
}

} // namespace

TEST_CASE("BDAT: chunks, pipelined and cut anywhere, make one message") {
    Harness h;
    Client c(h.port());
    envelope(c);
    // Three chunks in one write; the first holds what looks like commands
    // and a dot line: octets, not lines.
    const std::string one = "Subject: x\r\n\r\n.\r\nQUIT\r\n";
    const std::string two = "line";
    c.send("BDAT " + std::to_string(one.size()) + "\r\n" + one + "BDAT 4\r\n" + two +
           "BDAT 6 LAST\r\n two\r\n");
    CHECK(c.reply() == "250 2.0.0 Ok: " + std::to_string(one.size()) + " octets received");
    CHECK(c.reply() == "250 2.0.0 Ok: 4 octets received");
    const std::string r = c.reply();
    REQUIRE(starts(r, "250 2.0.0 Ok: queued as "));
    CHECK(stored(h, r) == one + "line two\r\n");
    REQUIRE(h.commits().size() == 1);
    // The chunk that arrives byte by byte is read whole, too.
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
    c.send("BDAT 5 LAST\r\n");
    for (char ch : std::string("ab\r\nc")) c.send(std::string(1, ch));
    const std::string r2 = c.reply();
    REQUIRE(starts(r2, "250 2.0.0 Ok: queued as "));
    CHECK(stored(h, r2) == "ab\r\nc\r\n");  // the last line gets its CRLF
    CHECK(starts(c.cmd("NOOP"), "250 "));
}

TEST_CASE("BDAT 0 LAST ends a message; an empty BDAT message is only the header") {
    Harness h;
    Client c(h.port());
    envelope(c);
    CHECK(chunk(c, "BDAT 3", "abc") == "250 2.0.0 Ok: 3 octets received");
    const std::string r = c.cmd("BDAT 0 LAST");
    REQUIRE(starts(r, "250 2.0.0 Ok: queued as "));
    CHECK(stored(h, r) == "abc\r\n");
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
    CHECK(starts(c.cmd("BDAT 0 last"), "250 2.0.0 Ok: queued as "));
    CHECK(h.commits().size() == 2);
}

TEST_CASE("BDAT out of order is refused and its octets still read") {
    Harness h;
    Client c(h.port());
    REQUIRE(starts(c.reply(), "220 "));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250-mx.test"));
    // The octets would be a command if they were read as one.
    CHECK(chunk(c, "BDAT 12", "RSET\r\nQUIT\r\n") == "503 5.5.1 Error: need MAIL command");
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    CHECK(chunk(c, "BDAT 6 LAST", "QUIT\r\n") == "554 5.5.1 Error: no valid recipients");
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
    CHECK(starts(chunk(c, "BDAT 2", "ab"), "250 "));
    CHECK(c.cmd("DATA") == "503 5.5.1 Error: DATA after BDAT");
    CHECK(starts(chunk(c, "BDAT 1 LAST", "c"), "250 2.0.0 Ok: queued as "));
    CHECK(c.cmd("BDAT 1x") == "501 5.5.4 Syntax: BDAT count [LAST]");
    CHECK(c.cmd("BDAT 1 MORE") == "501 5.5.4 Syntax: BDAT count [LAST]");
    CHECK(c.cmd("BDAT") == "501 5.5.4 Syntax: BDAT count [LAST]");
    // RSET drops a BDAT transaction and its file.
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
    CHECK(starts(chunk(c, "BDAT 2", "xy"), "250 "));
    CHECK(starts(c.cmd("RSET"), "250 "));
    CHECK(chunk(c, "BDAT 2 LAST", "xy") == "503 5.5.1 Error: need MAIL command");
    CHECK(starts(c.cmd("NOOP"), "250 "));
    CHECK(h.commits().size() == 1);
    CHECK(h.content_files().size() == 1);
}

TEST_CASE("BDAT: the size limit, and the chunk past it is read to its end") {
    Harness h([](smx::Config& c) { c.server.max_message_size = 100; });
    Client c(h.port());
    envelope(c);
    CHECK(starts(chunk(c, "BDAT 60", std::string(60, 'a')), "250 "));
    CHECK(chunk(c, "BDAT 5000", std::string(5000, 'b')) ==
          "552 5.3.4 Error: message file too big");
    // The transaction is over; a pipelined next chunk meets 503.
    CHECK(chunk(c, "BDAT 3 LAST", "abc") == "503 5.5.1 Error: need MAIL command");
    CHECK(starts(c.cmd("NOOP"), "250 "));
    CHECK(h.commits().empty());
    CHECK(h.content_files().empty());
}

TEST_CASE("BDAT: bare LF is rejected, also across chunks (no smuggling)") {
    Harness h;
    Client c(h.port());
    envelope(c);
    CHECK(chunk(c, "BDAT 9", "a\r\n.\nMAIL") == "550 5.6.11 Error: bare LF/CR not allowed");
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    REQUIRE(starts(c.cmd("RCPT TO:<b@b.test>"), "250 "));
    // "\r" ends one chunk, the next begins with "x": a bare CR.
    CHECK(starts(chunk(c, "BDAT 2", "a\r"), "250 "));
    CHECK(chunk(c, "BDAT 3 LAST", "x\r\n") == "550 5.6.11 Error: bare LF/CR not allowed");
    CHECK(starts(c.cmd("NOOP"), "250 "));
    CHECK(h.commits().empty());
    CHECK(h.content_files().empty());
}

TEST_CASE("BDAT: a chunk that stops coming meets data_timeout") {
    Harness h([](smx::Config& c) { c.server.data_timeout = std::chrono::seconds(1); });
    Client c(h.port());
    envelope(c);
    c.send("BDAT 100 LAST\r\nonly a few bytes");
    CHECK(starts(c.reply(), "421 4.4.2"));
    CHECK(c.closed());
    CHECK(h.commits().empty());
}
