// server.max_transactions and server.transaction_wait, through real sessions.
#include "tests/unit/smtps/harness.hpp"

#include <catch2/catch.hpp>

#include <chrono>
#include <memory>
#include <vector>

using namespace smtps_test;

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

void greeted(Client& c) {
    REQUIRE(starts(c.reply(), "220 "));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250-"));
}

// A client that has sent EHLO and opened a transaction.
void in_transaction(Client& c) {
    greeted(c);
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 2.1.0"));
}

double seconds_since(std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

} // namespace

TEST_CASE("past max_transactions a MAIL waits for a transaction to end") {
    Harness h([](smx::Config& c) {
        c.server.max_transactions = 2;
        c.server.transaction_wait = std::chrono::seconds(30);
    });
    Client a(h.port()), b(h.port());
    auto c = std::make_unique<Client>(h.port());
    in_transaction(a);
    in_transaction(b);
    greeted(*c);
    c->send("MAIL FROM:<c@a.test>\r\n");
    CHECK(c->drain(300).empty());  // both places taken
    // A message that ends frees its place: c goes on at once.
    REQUIRE(starts(a.cmd("RCPT TO:<x@b.test>"), "250"));
    REQUIRE(starts(a.cmd("DATA"), "354"));
    REQUIRE(starts(a.cmd("hi\r\n."), "250 2.0.0"));
    CHECK(starts(c->reply(), "250 2.1.0"));
    // So does RSET, and a client that goes away.
    Client d(h.port()), e(h.port());
    greeted(d);
    d.send("MAIL FROM:<d@a.test>\r\n");
    CHECK(d.drain(300).empty());
    REQUIRE(starts(b.cmd("RSET"), "250"));
    CHECK(starts(d.reply(), "250 2.1.0"));
    greeted(e);
    e.send("MAIL FROM:<e@a.test>\r\n");
    CHECK(e.drain(300).empty());
    c.reset();
    CHECK(starts(e.reply(), "250 2.1.0"));
}

TEST_CASE("a MAIL waits at most transaction_wait, then goes ahead over the limit") {
    Harness h([](smx::Config& c) {
        c.server.max_transactions = 1;
        c.server.transaction_wait = std::chrono::milliseconds(500);
    });
    Client a(h.port()), b(h.port());
    in_transaction(a);  // and holds it: a client cannot lock others out
    greeted(b);
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE(starts(b.cmd("MAIL FROM:<b@a.test>"), "250 2.1.0"));
    CHECK(seconds_since(t0) >= 0.45);
    REQUIRE(starts(b.cmd("RCPT TO:<x@b.test>"), "250"));
    REQUIRE(starts(b.cmd("DATA"), "354"));
    REQUIRE(starts(b.cmd("hi\r\n."), "250 2.0.0"));
    // a's place and the overrun's are both given back.
    REQUIRE(starts(a.cmd("RSET"), "250"));
    Client c(h.port());
    greeted(c);
    const auto t1 = std::chrono::steady_clock::now();
    REQUIRE(starts(c.cmd("MAIL FROM:<c@a.test>"), "250 2.1.0"));
    CHECK(seconds_since(t1) < 0.4);
}

TEST_CASE("waiting MAILs get places in the order they came") {
    Harness h([](smx::Config& c) {
        c.server.max_transactions = 1;
        c.server.transaction_wait = std::chrono::seconds(30);
    });
    Client a(h.port()), b(h.port()), c(h.port());
    in_transaction(a);
    greeted(b);
    greeted(c);
    b.send("MAIL FROM:<b@a.test>\r\n");
    CHECK(b.drain(200).empty());
    c.send("MAIL FROM:<c@a.test>\r\n");
    CHECK(c.drain(200).empty());
    REQUIRE(starts(a.cmd("RSET"), "250"));
    CHECK(starts(b.reply(), "250 2.1.0"));
    CHECK(c.drain(200).empty());
    REQUIRE(starts(b.cmd("RSET"), "250"));
    CHECK(starts(c.reply(), "250 2.1.0"));
}

TEST_CASE("a refused MAIL holds no place; max_transactions = 0 is no limit") {
    Harness h([](smx::Config& c) {
        c.server.max_transactions = 1;
        c.server.transaction_wait = std::chrono::seconds(30);
    });
    Client a(h.port()), b(h.port());
    greeted(a);
    CHECK(starts(a.cmd("MAIL FROM:<bad"), "501"));
    CHECK(starts(a.cmd("MAIL FROM:<a@a.test> FOO=bar"), "555"));
    greeted(b);
    CHECK(starts(b.cmd("MAIL FROM:<b@a.test>"), "250 2.1.0"));
    // A second MAIL in a transaction is refused without waiting for itself.
    CHECK(starts(b.cmd("MAIL FROM:<b@a.test>"), "503"));

    Harness open([](smx::Config& c) { c.server.max_transactions = 0; });
    std::vector<std::unique_ptr<Client>> many;
    for (int i = 0; i < 20; ++i) {
        many.push_back(std::make_unique<Client>(open.port()));
        in_transaction(*many.back());
    }
}
