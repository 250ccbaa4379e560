// Routing: transport_maps, [routes], sender-dependent relay hosts and the
// default route, in the order docs/config.md (Routing) gives.
#include "qmgr/routing.hpp"

#include "tests/unit/libsm/failing_table.hpp"

#include <catch2/catch.hpp>

using namespace smx::qmgr;
using Kind = Routing::Kind;

namespace {

smx::Route hosts(std::string host, std::uint16_t port) {
    smx::Route r;
    r.hosts.push_back(smx::HostPort{std::move(host), port, true});
    return r;
}

// The key and next hops of a delivery.
std::pair<std::string, std::vector<std::string>> to(const Routing& r) {
    REQUIRE(r.kind == Kind::deliver);
    REQUIRE(r.dest.nexthops);
    return {r.dest.key, *r.dest.nexthops};
}

} // namespace

TEST_CASE("router: exact, parent domain, default, mx per domain, none") {
    smx::Config cfg;
    cfg.routes["example.net"] = hosts("127.0.0.1", 2600);
    cfg.routes[".example.com"] = hosts("10.0.0.1", 25);
    smx::Route mx;
    mx.mx = true;
    cfg.routes["mx.test"] = mx;
    Router r(cfg);
    CHECK(to(r.route("u@example.net", "s@x")) ==
          std::pair{std::string("[127.0.0.1]:2600"), std::vector<std::string>{"[127.0.0.1]:2600"}});
    CHECK(to(r.route("u@a.example.com", "s@x")).first == "[10.0.0.1]:25");
    CHECK(to(r.route("u@mx.test", "s@x")) ==
          std::pair{std::string("mx:mx.test"), std::vector<std::string>{"mx"}});
    const Routing none = r.route("u@example.org", "s@x");
    CHECK(none.kind == Kind::defer);
    CHECK(smx::msg::to_string(none.reply) == "4.4.4 no route to example.org");
    cfg.default_route = hosts("192.0.2.1", 25);
    CHECK(to(r.route("u@example.org", "s@x")).first == "[192.0.2.1]:25");
}

TEST_CASE("router reload: new routes apply, next hops already handed out stay valid") {
    smx::Config cfg;
    cfg.default_route = hosts("127.0.0.1", 2600);
    Router r(cfg);
    const Routing before = r.route("u@example.net", "");
    cfg.default_route = hosts("127.0.0.1", 2601);
    cfg.routes["example.org"] = hosts("127.0.0.1", 2600);
    cfg.queue.transport_maps = {"inline:{ example.com = smtp:[127.0.0.1]:2602 }"};
    r.reload(std::make_shared<const smx::Config>(cfg));
    cfg = {};  // the router has its own copy
    CHECK(to(r.route("u@example.net", "")).first == "[127.0.0.1]:2601");
    CHECK(to(r.route("u@example.com", "")).first == "[127.0.0.1]:2602");
    // What the scheduler holds from before the reload is still there.
    CHECK(*before.dest.nexthops == std::vector<std::string>{"[127.0.0.1]:2600"});
    const Routing same = r.route("u@example.org", "");
    CHECK(same.dest.key == before.dest.key);
    CHECK(same.dest.nexthops == before.dest.nexthops);  // one list per distinct next hops
    // A table that cannot be opened refuses the reload: the running tables stay.
    smx::Config bad;
    bad.queue.transport_maps = {"texthash:/nonexistent/transport"};
    CHECK_THROWS_AS(r.reload(std::make_shared<const smx::Config>(bad)), smx::table::TableError);
    CHECK(to(r.route("u@example.com", "")).first == "[127.0.0.1]:2602");
}

TEST_CASE("transport_maps: by address, domain, parent, *, before [routes]") {
    smx::Config cfg;
    cfg.rewrite.recipient_delimiter = "+";
    cfg.routes["example.com"] = hosts("10.0.0.9", 25);
    cfg.default_route = hosts("10.0.0.10", 25);
    cfg.queue.transport_maps = {
        "inline:{ vip+list@example.com = smtp:[10.0.0.1]:2525,"
        " boss@example.com = smtp:[10.0.0.2],"
        " example.com = relay:[10.0.0.3]:587,"
        " .example.com = smtp:mx.example.net,"
        " { lb.example = smtp:[10.0.0.4]:25, [10.0.0.5]:25 },"
        " nh.example = :[10.0.0.6],"
        " * = smtp:[10.0.0.7] }"};
    Router r(cfg);
    CHECK(to(r.route("vip+list@example.com", "")).first == "[10.0.0.1]:2525");
    CHECK(to(r.route("boss+x@example.com", "")).first == "[10.0.0.2]:25");  // user@domain
    CHECK(to(r.route("other@Example.COM", "")).first == "[10.0.0.3]:587");  // domain, any case
    // .parent: the subdomains; smtp:host (no brackets) is the MX of host.
    CHECK(to(r.route("a@deep.sub.example.com", "")) ==
          std::pair{std::string("mx.example.net:25"), std::vector<std::string>{"mx.example.net:25"}});
    CHECK(to(r.route("a@lb.example", "")).second ==
          std::vector<std::string>{"[10.0.0.4]:25", "[10.0.0.5]:25"});
    CHECK(to(r.route("a@nh.example", "")).first == "[10.0.0.6]:25");  // next hop only
    CHECK(to(r.route("a@elsewhere.example", "")).first == "[10.0.0.7]:25");  // *
}

TEST_CASE("transport_maps: error: bounces, retry: defers, other transports are refused") {
    smx::Config cfg;
    cfg.default_route = hosts("10.0.0.10", 25);
    cfg.queue.transport_maps = {
        "inline:{ gone@example.com = error:5.1.1 mailbox gone, old.example = error:no longer here,"
        " busy.example = retry:4.3.2 moving servers, soon.example = error:4.7.1 not yet,"
        " local.example = local:, pipe.example = pipe:/bin/sh, bad.example = smtp:[10.0.0.1]:99999 }"};
    Router r(cfg);
    Routing x = r.route("gone@example.com", "");
    CHECK(x.kind == Kind::bounce);
    CHECK(smx::msg::to_string(x.reply) == "5.1.1 mailbox gone");
    x = r.route("a@old.example", "");
    CHECK(x.kind == Kind::bounce);
    CHECK(smx::msg::to_string(x.reply) == "5.0.0 no longer here");
    x = r.route("a@busy.example", "");
    CHECK(x.kind == Kind::defer);
    CHECK(smx::msg::to_string(x.reply) == "4.3.2 moving servers");
    CHECK(r.route("a@soon.example", "").kind == Kind::defer);  // error: with a 4.x.x status
    for (const char* rcpt : {"a@local.example", "a@pipe.example", "a@bad.example"}) {
        x = r.route(rcpt, "");
        CHECK(x.kind == Kind::defer);
        CHECK(x.reply.enhanced == "4.3.5");
    }
    CHECK(smx::msg::to_string(r.route("a@local.example", "").reply) ==
          "4.3.5 mail transport unavailable: local");
}

TEST_CASE("sender_dependent_relayhost_maps replaces the default route only") {
    smx::Config cfg;
    cfg.rewrite.recipient_delimiter = "+";
    cfg.default_route = hosts("10.0.0.10", 25);
    cfg.routes["routed.example"] = hosts("10.0.0.11", 25);
    cfg.queue.transport_maps = {"inline:{ transported.example = smtp:[10.0.0.12],"
                                " plain.example = : }"};
    cfg.queue.sender_dependent_relayhost_maps = {
        "inline:{ alice@a.example = [10.0.0.1]:2525, @a.example = [10.0.0.2],"
        " bob@b.example = DUNNO, <> = [10.0.0.3] }"};
    Router r(cfg);
    CHECK(to(r.route("x@any.example", "alice@a.example")).first == "[10.0.0.1]:2525");
    CHECK(to(r.route("x@any.example", "alice+tag@a.example")).first == "[10.0.0.1]:2525");
    CHECK(to(r.route("x@any.example", "carol@A.example")).first == "[10.0.0.2]:25");
    CHECK(to(r.route("x@any.example", "bob@b.example")).first == "[10.0.0.10]:25");  // DUNNO
    CHECK(to(r.route("x@any.example", "dave@d.example")).first == "[10.0.0.10]:25");
    CHECK(to(r.route("x@any.example", "")).first == "[10.0.0.3]:25");  // the null sender
    // Explicit routes and transports win; an entry without a next hop does not.
    CHECK(to(r.route("x@routed.example", "alice@a.example")).first == "[10.0.0.11]:25");
    CHECK(to(r.route("x@transported.example", "alice@a.example")).first == "[10.0.0.12]:25");
    CHECK(to(r.route("x@plain.example", "alice@a.example")).first == "[10.0.0.1]:2525");
    // Two senders' recipients with the same next hop share one queue.
    CHECK(r.route("x@any.example", "carol@a.example").dest.nexthops ==
          r.route("y@other.example", "erin@a.example").dest.nexthops);
}

TEST_CASE("routing tables that fail defer with 4.3.0, never route elsewhere") {
    smx::Config cfg;
    cfg.default_route = hosts("10.0.0.10", 25);
    cfg.queue.transport_maps = {"fail:"};
    Routing x = Router(cfg, smx::test::open_tables).route("a@example.com", "s@example.org");
    CHECK(x.kind == Kind::defer);
    CHECK(smx::msg::to_string(x.reply) == "4.3.0 transport_maps lookup failure");
    cfg.queue.transport_maps.clear();
    cfg.queue.sender_dependent_relayhost_maps = {"fail:"};
    x = Router(cfg, smx::test::open_tables).route("a@example.com", "s@example.org");
    CHECK(x.kind == Kind::defer);
    CHECK(smx::msg::to_string(x.reply) == "4.3.0 sender_dependent_relayhost_maps lookup failure");
}

TEST_CASE("a routing table that cannot be opened is an error naming the key") {
    smx::Config cfg;
    cfg.queue.transport_maps = {"texthash:/nonexistent/transport"};
    CHECK_THROWS_WITH(Router(cfg), Catch::Contains("queue.transport_maps: texthash:/nonexistent/transport"));
}
