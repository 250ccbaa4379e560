#include "smtps/restrictions.hpp"

#include <catch2/catch.hpp>

using namespace smx::smtps;

namespace {

// A table whose every lookup fails (a read error of a Berkeley DB file).
class Failing final : public smx::table::Table {
public:
    Failing() : Table("hash:/broken") {}
    smx::table::Lookup find(std::string_view) const override {
        return {smx::table::Status::failed, {}};
    }
};

struct Fixture {
    smx::Config cfg;
    Fixture() {
        cfg.server.relay_networks = {smx::parse_cidr("k", "127.0.0.1/32")};
        cfg.server.relay_domains = {"example.org"};
    }
    // A session from ip (trusted when in relay_networks).
    struct Session {
        smx::PolicyTables tables;
        Restrictions r;
        Session(const smx::Config& cfg, const std::string& ip)
            : tables(cfg.policy), r(cfg, tables, ip, cfg.server.in_relay_networks(ip), "unknown[" + ip + "]") {}
    };
    std::unique_ptr<Session> session(const std::string& ip = "192.0.2.7") {
        return std::make_unique<Session>(cfg, ip);
    }
};

// The reply of a stage, or "" when it passed.
std::string said(const Outcome& o) { return o.refusal ? o.refusal->reply : std::string(); }

// o refused with reply, counted as why.
void check_refused(const Outcome& o, const std::string& reply, smx::Rejection why) {
    REQUIRE(o.refusal);
    CHECK(o.refusal->reply == reply);
    CHECK(o.refusal->why == why);
}

// One transaction up to the RCPT of rcpt: its reply ("" when taken).
std::string rcpt_reply(Restrictions& r, const std::string& rcpt, const std::string& sender = "s@sender.net") {
    REQUIRE(said(r.connect("unknown")).empty());
    REQUIRE(said(r.helo("client.example")).empty());
    REQUIRE(said(r.mail(sender)).empty());
    return said(r.rcpt("client.example", sender, rcpt));
}

} // namespace

TEST_CASE("client_access: refusals wait for RCPT with delay_reject, else come at connect", "[restrictions]") {
    Fixture f;
    f.cfg.policy.client_access = {"inline:{192.0.2=REJECT, 198.51.100.1=DEFER go away}"};
    auto s = f.session();
    CHECK(rcpt_reply(s->r, "u@example.org") ==
          "554 5.7.1 <unknown[192.0.2.7]>: Client host rejected: Access denied");
    CHECK(rcpt_reply(f.session("198.51.100.1")->r, "u@example.org") ==
          "450 4.7.1 <unknown[198.51.100.1]>: Client host rejected: go away");
    CHECK(rcpt_reply(f.session("203.0.113.1")->r, "u@example.org").empty());

    f.cfg.policy.delay_reject = false;
    s = f.session();
    check_refused(s->r.connect("unknown"),
                  "554 5.7.1 <unknown[192.0.2.7]>: Client host rejected: Access denied",
                  smx::Rejection::access_denied);
}

TEST_CASE("client_access: the client name and its parents before the address", "[restrictions]") {
    Fixture f;
    f.cfg.policy.client_access = {"inline:{example.net=REJECT by name, 192.0.2.7=OK}"};
    auto s = f.session();
    REQUIRE(said(s->r.connect("mx.example.net")).empty());
    s->r.helo("h");
    s->r.mail("a@b.c");
    CHECK(said(s->r.rcpt("h", "a@b.c", "u@example.org")) ==
          "554 5.7.1 <unknown[192.0.2.7]>: Client host rejected: by name");
}

TEST_CASE("helo_access and sender_access, the null sender as <>", "[restrictions]") {
    Fixture f;
    f.cfg.policy.helo_access = {"inline:{bad.example=REJECT}"};
    f.cfg.policy.sender_access = {"inline:{<>=550 5.7.9 no bounces here, spam.example=REJECT}"};
    auto s = f.session();
    s->r.connect("unknown");
    s->r.helo("host.bad.example");
    s->r.mail("a@b.c");
    CHECK(said(s->r.rcpt("host.bad.example", "a@b.c", "u@example.org")) ==
          "554 5.7.1 <host.bad.example>: Helo command rejected: Access denied");
    CHECK(rcpt_reply(f.session()->r, "u@example.org", "") ==
          "550 5.7.9 <>: Sender address rejected: no bounces here");
    CHECK(rcpt_reply(f.session()->r, "u@example.org", "x@mail.spam.example") ==
          "554 5.7.1 <x@mail.spam.example>: Sender address rejected: Access denied");

    f.cfg.policy.delay_reject = false;
    s = f.session();
    CHECK(said(s->r.helo("bad.example")) ==
          "554 5.7.1 <bad.example>: Helo command rejected: Access denied");
    CHECK(said(s->r.mail("")) == "550 5.7.9 <>: Sender address rejected: no bounces here");
}

TEST_CASE("recipient_access actions and reply codes", "[restrictions]") {
    Fixture f;
    f.cfg.rewrite.recipient_delimiter = "+";
    f.cfg.policy.recipient_access = {
        "inline:{a@example.org=REJECT, b@example.org=DEFER, c@example.org=421 try later,"
        " d@example.org=550 5.1.6 moved away, e@=DUNNO, e@example.org=REJECT,"
        " f@example.org=OK, g@example.org=FROBNICATE, h@example.org=12345,"
        " i@example.org=REJECT 4.7.0 mixed}"};
    auto reply = [&](const std::string& rcpt) { return rcpt_reply(f.session()->r, rcpt); };
    CHECK(reply("a@example.org") == "554 5.7.1 <a@example.org>: Recipient address rejected: Access denied");
    CHECK(reply("a+ext@example.org") ==
          "554 5.7.1 <a+ext@example.org>: Recipient address rejected: Access denied");
    CHECK(reply("b@example.org") == "450 4.7.1 <b@example.org>: Recipient address rejected: Access denied");
    CHECK(reply("c@example.org") == "421 4.7.1 <c@example.org>: Recipient address rejected: try later");
    CHECK(reply("d@example.org") == "550 5.1.6 <d@example.org>: Recipient address rejected: moved away");
    // The first key found decides: user@domain before user@.
    CHECK(reply("e@example.org") == "554 5.7.1 <e@example.org>: Recipient address rejected: Access denied");
    CHECK(reply("f@example.org").empty());
    CHECK(reply("h@example.org").empty());
    // The SMTP code's class wins over the text's.
    CHECK(reply("i@example.org") == "554 5.7.0 <i@example.org>: Recipient address rejected: mixed");
    // An unknown action: neither accepted nor refused for good.
    const auto s = f.session();
    rcpt_reply(s->r, "x@example.org");
    check_refused(s->r.rcpt("client.example", "s@sender.net", "g@example.org"),
                  "451 4.3.5 Server configuration error", smx::Rejection::policy_unavailable);
}

TEST_CASE("OK in recipient_access does not open the relay", "[restrictions]") {
    Fixture f;
    f.cfg.policy.recipient_access = {"inline:{elsewhere.net=OK}"};
    CHECK(rcpt_reply(f.session()->r, "u@elsewhere.net") == "554 5.7.1 <u@elsewhere.net>: Relay access denied");
    CHECK(rcpt_reply(f.session("127.0.0.1")->r, "u@elsewhere.net").empty());
}

TEST_CASE("DEFER_IF_PERMIT and DEFER_IF_REJECT", "[restrictions]") {
    Fixture f;
    f.cfg.policy.client_access = {"inline:{192.0.2.7=DEFER_IF_PERMIT, 127.0.0.1=DEFER_IF_PERMIT 4.7.5 later}"};
    f.cfg.policy.recipient_access = {"inline:{elsewhere.net=DEFER_IF_REJECT not now, no@example.org=REJECT}"};
    // Permitted in the end: deferred with the client's text.
    CHECK(rcpt_reply(f.session()->r, "u@example.org") ==
          "450 4.7.1 <unknown[192.0.2.7]>: Client host rejected: Service unavailable");
    CHECK(rcpt_reply(f.session("127.0.0.1")->r, "u@elsewhere.net") ==
          "450 4.7.5 <unknown[127.0.0.1]>: Client host rejected: later");
    // Refused in the end: the refusal stands ...
    CHECK(rcpt_reply(f.session()->r, "no@example.org") ==
          "554 5.7.1 <no@example.org>: Recipient address rejected: Access denied");
    // ... unless a DEFER_IF_REJECT of its list came first.
    CHECK(rcpt_reply(f.session("203.0.113.9")->r, "u@elsewhere.net") ==
          "450 4.7.1 <u@elsewhere.net>: Recipient address rejected: not now");
}

TEST_CASE("HOLD and DISCARD mark the transaction, once per MAIL", "[restrictions]") {
    Fixture f;
    f.cfg.policy.sender_access = {"inline:{held@x.net=HOLD, gone@x.net=DISCARD quietly}"};
    auto s = f.session();
    s->r.connect("unknown");
    s->r.helo("h");
    s->r.mail("held@x.net");
    Outcome o = s->r.rcpt("h", "held@x.net", "u@example.org");
    CHECK_FALSE(o.refusal);
    REQUIRE(o.notes.size() == 1);
    CHECK(o.notes[0].kind == "hold");
    CHECK(o.notes[0].text == "<held@x.net>: Sender address triggers HOLD action");
    CHECK(s->r.hold() == o.notes[0].text);
    CHECK(s->r.rcpt("h", "held@x.net", "v@example.org").notes.empty());  // noted once
    s->r.mail("gone@x.net");
    CHECK(s->r.hold().empty());
    o = s->r.rcpt("h", "gone@x.net", "u@example.org");
    REQUIRE(o.notes.size() == 1);
    CHECK(o.notes[0].kind == "discard");
    CHECK(o.notes[0].text == "<gone@x.net>: Sender address quietly");
    CHECK(s->r.discard());
    s->r.mail("other@x.net");
    CHECK_FALSE(s->r.discard());

    // Without delay_reject the client list runs before any transaction:
    // HOLD there is skipped (with a warning), as postfix skips it.
    f.cfg.policy.delay_reject = false;
    f.cfg.policy.client_access = {"inline:{192.0.2.7=HOLD}"};
    s = f.session();
    CHECK(s->r.connect("unknown").notes.empty());
    s->r.helo("h");
    s->r.mail("a@b.c");
    CHECK(s->r.rcpt("h", "a@b.c", "u@example.org").notes.empty());
    CHECK(s->r.hold().empty());
}

TEST_CASE("relay_recipient_maps: known recipients of relay_domains, for every client", "[restrictions]") {
    Fixture f;
    f.cfg.rewrite.recipient_delimiter = "+-";
    f.cfg.policy.relay_recipient_maps = {"inline:{alice@example.org=x}", "inline:{@catchall.example=x}"};
    f.cfg.server.relay_domains = {"example.org", "catchall.example"};
    const std::string unknown =
        "550 5.1.1 <bob@example.org>: Recipient address rejected: User unknown in relay recipient table";
    CHECK(rcpt_reply(f.session()->r, "alice@example.org").empty());
    CHECK(rcpt_reply(f.session()->r, "Alice@Example.ORG").empty());
    CHECK(rcpt_reply(f.session()->r, "alice+tag@example.org").empty());
    CHECK(rcpt_reply(f.session()->r, "alice-tag@example.org").empty());
    CHECK(rcpt_reply(f.session()->r, "anyone@catchall.example").empty());
    CHECK(rcpt_reply(f.session()->r, "bob@example.org") == unknown);
    CHECK(rcpt_reply(f.session("127.0.0.1")->r, "bob@example.org") == unknown);
    // Not a relay domain: a trusted client relays without the table.
    CHECK(rcpt_reply(f.session("127.0.0.1")->r, "bob@elsewhere.net").empty());
    const auto s = f.session();
    rcpt_reply(s->r, "alice@example.org");
    check_refused(s->r.rcpt("client.example", "s@sender.net", "bob@example.org"), unknown,
                  smx::Rejection::unknown_recipient);
}

TEST_CASE("a failed lookup is a temporary failure, never a pass", "[restrictions]") {
    Fixture f;
    f.cfg.server.relay_domains = {"example.org"};
    auto s = f.session();
    s->tables.relay_recipient_maps = smx::table::TableList({std::make_shared<Failing>()});
    CHECK(rcpt_reply(s->r, "u@example.org") == "451 4.3.0 <u@example.org>: Temporary lookup failure");
    s = f.session();
    s->tables.sender_access = smx::table::TableList({std::make_shared<Failing>()});
    const std::string r = rcpt_reply(s->r, "u@example.org");
    CHECK(r == "451 4.3.0 <s@sender.net>: Temporary lookup failure");
    s = f.session();
    s->tables.client_access = smx::table::TableList({std::make_shared<Failing>()});
    rcpt_reply(s->r, "x@example.org");
    check_refused(s->r.rcpt("client.example", "s@sender.net", "u@example.org"),
                  "451 4.3.0 <unknown[192.0.2.7]>: Temporary lookup failure",
                  smx::Rejection::policy_unavailable);
}

TEST_CASE("replies from table text are one printable line", "[restrictions]") {
    Fixture f;
    f.cfg.policy.recipient_access = {"inline:{a@example.org=REJECT caf\xc3\xa9 " + std::string(600, 'x') + "}"};
    const std::string r = rcpt_reply(f.session()->r, "a@example.org");
    CHECK(r.size() == 510);
    CHECK(r.starts_with("554 5.7.1 <a@example.org>: Recipient address rejected: caf?? xxx"));
}

TEST_CASE("a table that cannot be opened names its key", "[restrictions]") {
    smx::PolicyConfig p;
    p.sender_access = {"hash:/nonexistent/h13-table"};
    try {
        smx::PolicyTables t(p);
        FAIL("opened");
    } catch (const smx::ConfigError& e) {
        CHECK(e.key == "policy.sender_access");
        CHECK(std::string(e.what()).find("hash:/nonexistent/h13-table") != std::string::npos);
    }
}
