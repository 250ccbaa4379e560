// QMGR's per-client table (qmgr/anvil.hpp): counts, windows, expiry, the
// bound on its size, and the links that take their connections with them.
#include "qmgr/anvil.hpp"

#include <catch2/catch.hpp>

using smx::msg::AnvilOp;
using smx::msg::AnvilReply;
using smx::msg::AnvilRequest;
using smx::qmgr::Anvil;
using namespace std::chrono_literals;

namespace {

const Anvil::Time t0{};

AnvilReply ask(Anvil& a, AnvilOp op, const std::string& client, Anvil::Time now,
               std::uint64_t link = 1, std::uint32_t mail_limit = 0, std::uint32_t rcpt_limit = 0) {
    const auto r = a.handle(link, AnvilRequest{op, client, mail_limit, rcpt_limit}, now);
    REQUIRE(r);
    return *r;
}

void tell(Anvil& a, AnvilOp op, const std::string& client, Anvil::Time now, std::uint64_t link = 1) {
    CHECK_FALSE(a.handle(link, AnvilRequest{op, client, 0, 0}, now));
}

} // namespace

TEST_CASE("anvil: connections are counted concurrently and by rate, per client", "[anvil]") {
    Anvil a(60s, 1000);
    CHECK(ask(a, AnvilOp::connect, "192.0.2.1", t0).connections == 1);
    const auto second = ask(a, AnvilOp::connect, "192.0.2.1", t0 + 1s);
    CHECK(second.connections == 2);
    CHECK(second.rate == 2);
    CHECK(ask(a, AnvilOp::connect, "192.0.2.2", t0 + 1s).connections == 1);
    tell(a, AnvilOp::disconnect, "192.0.2.1", t0 + 2s);
    const auto third = ask(a, AnvilOp::connect, "192.0.2.1", t0 + 3s);
    CHECK(third.connections == 2);
    CHECK(third.rate == 3);  // the rate counts every connection of the window
    CHECK(a.connections("192.0.2.2") == 1);
}

TEST_CASE("anvil: a rate window ends rate_time_unit after it began", "[anvil]") {
    Anvil a(60s, 1000);
    CHECK(ask(a, AnvilOp::mail, "192.0.2.1", t0).rate == 1);
    CHECK(ask(a, AnvilOp::mail, "192.0.2.1", t0 + 59s).rate == 2);
    CHECK(ask(a, AnvilOp::rcpt, "192.0.2.1", t0 + 59s).rate == 1);
    // The window began at t0: at t0 + 60s a new one begins, for every rate.
    CHECK(ask(a, AnvilOp::mail, "192.0.2.1", t0 + 60s).rate == 1);
    CHECK(ask(a, AnvilOp::rcpt, "192.0.2.1", t0 + 60s).rate == 1);
}

TEST_CASE("anvil: a MAIL grants one RCPT ahead only within both limits", "[anvil]") {
    Anvil a(60s, 1000);
    // Recipient limit 2: two grants, then none (the third RCPT must ask).
    CHECK(ask(a, AnvilOp::mail, "c", t0, 1, 0, 2).rcpt_granted);
    CHECK(ask(a, AnvilOp::mail, "c", t0, 1, 0, 2).rcpt_granted);
    CHECK_FALSE(ask(a, AnvilOp::mail, "c", t0, 1, 0, 2).rcpt_granted);
    CHECK(ask(a, AnvilOp::rcpt, "c", t0).rate == 3);
    // A grant the transaction did not use goes back.
    tell(a, AnvilOp::unused_rcpt, "c", t0);
    tell(a, AnvilOp::unused_rcpt, "c", t0);
    CHECK(ask(a, AnvilOp::mail, "c", t0, 1, 0, 2).rcpt_granted);
    // A MAIL over its own limit grants nothing.
    const auto over = ask(a, AnvilOp::mail, "d", t0, 1, 1, 5);
    CHECK(over.rate == 1);
    CHECK(over.rcpt_granted);
    const auto second = ask(a, AnvilOp::mail, "d", t0, 1, 1, 5);
    CHECK(second.rate == 2);
    CHECK_FALSE(second.rcpt_granted);
    // Limits of 0: no recipient limit, no grant; no MAIL limit, grants.
    CHECK_FALSE(ask(a, AnvilOp::mail, "e", t0, 1, 0, 0).rcpt_granted);
    for (int i = 0; i < 10; ++i) CHECK(ask(a, AnvilOp::mail, "f", t0, 1, 0, 100).rcpt_granted);
}

TEST_CASE("anvil: idle clients are forgotten a rate_time_unit after they were last seen", "[anvil]") {
    Anvil a(60s, 1000);
    ask(a, AnvilOp::mail, "idle", t0);
    ask(a, AnvilOp::connect, "connected", t0);
    CHECK(a.clients() == 2);
    ask(a, AnvilOp::mail, "other", t0 + 59s);
    CHECK(a.clients() == 3);
    // Any request expires: "idle" went at t0 + 60s, "connected" stays.
    ask(a, AnvilOp::mail, "other", t0 + 61s);
    CHECK(a.clients() == 2);
    CHECK(a.connections("connected") == 1);
    tell(a, AnvilOp::disconnect, "connected", t0 + 200s);
    ask(a, AnvilOp::mail, "other", t0 + 259s);
    CHECK(a.clients() == 2);
    ask(a, AnvilOp::mail, "other", t0 + 260s);
    CHECK(a.clients() == 1);  // "connected" 60 s after its disconnect
}

TEST_CASE("anvil: max_clients bounds the table; clients with connections stay", "[anvil]") {
    Anvil a(60s, 1000);
    ask(a, AnvilOp::connect, "held", t0);
    for (int i = 0; i < 5000; ++i) ask(a, AnvilOp::mail, "10.0." + std::to_string(i), t0);
    CHECK(a.clients() == 1000);
    CHECK(a.evicted() == 4001);
    CHECK(a.connections("held") == 1);
    // The least recently seen goes first: the newest are still counted.
    CHECK(ask(a, AnvilOp::mail, "10.0.4999", t0).rate == 2);
    CHECK(ask(a, AnvilOp::mail, "10.0.0", t0).rate == 1);
    // Connected clients are never evicted: past max_clients by their number.
    for (int i = 0; i < 1500; ++i) ask(a, AnvilOp::connect, "172.16." + std::to_string(i), t0);
    CHECK(a.clients() == 1501);
    a.configure(60s, 2000);
    for (int i = 0; i < 1500; ++i) tell(a, AnvilOp::disconnect, "172.16." + std::to_string(i), t0);
    for (int i = 0; i < 1000; ++i) ask(a, AnvilOp::mail, "192.168." + std::to_string(i), t0);
    CHECK(a.clients() == 2000);
}

TEST_CASE("anvil: a link that goes takes its connections; others' disconnects are ignored",
          "[anvil]") {
    Anvil a(60s, 1000);
    ask(a, AnvilOp::connect, "c", t0, 1);
    ask(a, AnvilOp::connect, "c", t0, 1);
    ask(a, AnvilOp::connect, "c", t0, 2);
    CHECK(a.connections("c") == 3);
    tell(a, AnvilOp::disconnect, "c", t0, 3);  // link 3 counted none
    tell(a, AnvilOp::disconnect, "x", t0, 1);  // nor a client never connected
    CHECK(a.connections("c") == 3);
    a.drop_link(1);
    CHECK(a.connections("c") == 1);
    tell(a, AnvilOp::disconnect, "c", t0, 1);  // late: link 1 holds nothing now
    CHECK(a.connections("c") == 1);
    tell(a, AnvilOp::disconnect, "c", t0, 2);
    CHECK(a.connections("c") == 0);
    a.drop_link(2);
}
