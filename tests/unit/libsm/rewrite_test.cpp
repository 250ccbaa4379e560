#include "libsm/rewrite.hpp"

#include "tests/unit/libsm/failing_table.hpp"

#include <catch2/catch.hpp>


using smx::RewriteConfig;
using smx::Rewriter;
using smx::msg::Recipient;

namespace {

struct Expanded {
    smx::RewriteResult result;
    std::vector<Recipient> rcpts;
    std::vector<std::string> addrs() const {
        std::vector<std::string> out;
        for (const auto& r : rcpts) out.push_back(r.addr);
        return out;
    }
};

Expanded expand(const RewriteConfig& cfg, std::string_view addr, std::string_view params = {}) {
    Rewriter rw(cfg, smx::test::open_tables);
    Expanded e;
    e.result = rw.recipient(addr, params, e.rcpts);
    return e;
}

RewriteConfig virtual_of(std::string table) {
    RewriteConfig cfg;
    cfg.virtual_alias_maps = {"inline:{" + std::move(table) + "}"};
    return cfg;
}

} // namespace

TEST_CASE("rewrite: nothing configured keeps the envelope as it is", "[rewrite]") {
    const auto e = expand({}, "User@Example.COM", "NOTIFY=NEVER");
    REQUIRE(e.result.ok());
    REQUIRE(e.rcpts.size() == 1);
    CHECK(e.rcpts[0].addr == "User@Example.COM");
    CHECK(e.rcpts[0].params == "NOTIFY=NEVER");
    std::string sender = "s@example.com";
    CHECK(Rewriter().sender(sender).ok());
    CHECK(sender == "s@example.com");
}

TEST_CASE("rewrite: canonical maps for sender and recipients, in postfix's order", "[rewrite]") {
    RewriteConfig cfg;
    cfg.sender_canonical_maps = {"inline:{ s@old.example = s@mid.example }"};
    cfg.canonical_maps = {"inline:{ s@mid.example = s@new.example, @legacy.example = @example.com,"
                          " r@old.example = r@new.example }"};
    cfg.recipient_canonical_maps = {"inline:{ x@old.example = r@old.example }"};
    Rewriter rw(cfg, smx::test::open_tables);
    std::string sender = "s@old.example";
    REQUIRE(rw.sender(sender).ok());
    CHECK(sender == "s@new.example");  // sender_canonical_maps, then canonical_maps
    sender = "Anyone@Legacy.example";
    REQUIRE(rw.sender(sender).ok());
    CHECK(sender == "Anyone@example.com");  // @domain keeps the local part
    sender.clear();
    REQUIRE(rw.sender(sender).ok());
    CHECK(sender.empty());  // the null sender stays null

    std::vector<Recipient> out;
    REQUIRE(rw.recipient("x@old.example", "NOTIFY=FAILURE", out).ok());
    REQUIRE(out.size() == 1);
    CHECK(out[0].addr == "r@new.example");
    // The DSN names what the client gave, and NOTIFY goes on.
    CHECK(out[0].params == "NOTIFY=FAILURE ORCPT=rfc822;x@old.example");
}

TEST_CASE("rewrite: a canonical loop is refused, a self-mapping is not", "[rewrite]") {
    RewriteConfig cfg;
    cfg.canonical_maps = {"inline:{ a@x = b@x, b@x = a@x, c@x = C@x }"};
    Rewriter rw(cfg, smx::test::open_tables);
    std::string s = "a@x";
    const auto r = rw.sender(s);
    CHECK(r.reply == "451 4.6.0 <a@x>: Alias expansion error");
    CHECK(r.warning.find("canonical_maps map nesting") != std::string::npos);
    s = "c@x";
    CHECK(rw.sender(s).ok());
    CHECK(s == "c@x");
}

TEST_CASE("rewrite: virtual aliases expand one to many, recursively, ORCPT naming the original",
          "[rewrite]") {
    const auto cfg = virtual_of("{ team@example.com = alice@example.com, list@example.com },"
                                "{ list@example.com = bob@other.example, carol@other.example }");
    const auto e = expand(cfg, "team@example.com", "NOTIFY=SUCCESS,FAILURE");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() ==
          std::vector<std::string>{"alice@example.com", "bob@other.example", "carol@other.example"});
    for (const auto& r : e.rcpts)
        CHECK(r.params == "NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;team@example.com");
}

TEST_CASE("rewrite: the client's ORCPT is kept; ORCPT is xtext", "[rewrite]") {
    const auto cfg = virtual_of("{ a@example.com = z@example.com }, { c+d@example.com = z@example.com }");
    auto e = expand(cfg, "a@example.com", "ORCPT=rfc822;first@example.org");
    REQUIRE(e.result.ok());
    CHECK(e.rcpts[0].params == "ORCPT=rfc822;first@example.org");
    e = expand(cfg, "c+d@example.com");
    REQUIRE(e.result.ok());
    CHECK(e.rcpts[0].params == "ORCPT=rfc822;c+2Bd@example.com");
}

TEST_CASE("rewrite: duplicates collapse; an address mapping to itself is kept once", "[rewrite]") {
    const auto cfg = virtual_of("{ a@x = a@x, b@x, c@x }, { b@x = c@x, A@X }");
    const auto e = expand(cfg, "a@x");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"a@x", "c@x"});
    // a@x is the original: no ORCPT for it.
    CHECK(e.rcpts[0].params.empty());
    CHECK(e.rcpts[1].params == "ORCPT=rfc822;a@x");
}

TEST_CASE("rewrite: an alias loop is refused with 4.6.0 and a warning", "[rewrite]") {
    const auto cfg = virtual_of("{ a@x = b@x }, { b@x = c@x }, { c@x = a@x }");
    const auto e = expand(cfg, "a@x");
    CHECK(e.result.reply == "451 4.6.0 <a@x>: Alias expansion error");
    CHECK(e.result.warning == "virtual_alias_maps loop for a@x: c@x -> a@x");
    CHECK(e.rcpts.empty());
}

TEST_CASE("rewrite: the recursion limit", "[rewrite]") {
    // a0 -> a1 -> ... -> a5: five levels of nesting.
    std::string table;
    for (int i = 0; i < 5; ++i)
        table += "{ a" + std::to_string(i) + "@x = a" + std::to_string(i + 1) + "@x },";
    auto cfg = virtual_of(table);
    cfg.virtual_alias_recursion_limit = 5;
    auto e = expand(cfg, "a0@x");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"a5@x"});
    cfg.virtual_alias_recursion_limit = 4;
    e = expand(cfg, "a0@x");
    CHECK(e.result.reply == "451 4.6.0 <a0@x>: Alias expansion error");
    CHECK(e.result.warning == "unreasonable virtual_alias_maps map nesting for a0@x");
}

TEST_CASE("rewrite: the expansion limit", "[rewrite]") {
    auto cfg = virtual_of("{ all@x = u1@x, u2@x, u3@x, u1@x }");
    cfg.virtual_alias_expansion_limit = 3;  // duplicates do not count
    auto e = expand(cfg, "all@x");
    REQUIRE(e.result.ok());
    CHECK(e.rcpts.size() == 3);
    cfg.virtual_alias_expansion_limit = 2;
    e = expand(cfg, "all@x");
    CHECK(e.result.reply == "451 4.6.0 <all@x>: Alias expansion error");
    CHECK(e.result.warning == "unreasonable virtual_alias_maps map expansion size for all@x");
    CHECK(e.rcpts.empty());
}

TEST_CASE("rewrite: a diamond of aliases is walked once", "[rewrite]") {
    // 2^20 paths, 40 distinct addresses: fast, and each leaf once.
    std::string table;
    for (int i = 0; i < 20; ++i) {
        const std::string n = std::to_string(i + 1);
        table += "{ l" + std::to_string(i) + "@x = l" + n + "@x, r" + n + "@x },";
        table += "{ r" + std::to_string(i) + "@x = l" + n + "@x, r" + n + "@x },";
    }
    const auto e = expand(virtual_of(table), "l0@x");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"l20@x", "r20@x"});
}

TEST_CASE("rewrite: address extensions with recipient_delimiter", "[rewrite]") {
    auto cfg = virtual_of("{ user@example.com = u@inside.example }, { @catch.example = @inside.example }");
    cfg.recipient_delimiter = "+";
    auto e = expand(cfg, "user+news@example.com");
    REQUIRE(e.result.ok());
    // Matched without the extension: it is carried over (postfix's propagation).
    CHECK(e.addrs() == std::vector<std::string>{"u+news@inside.example"});
    e = expand(cfg, "any+x@catch.example");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"any+x@inside.example"});
    // Without a delimiter "user+news" is a name of its own.
    cfg.recipient_delimiter.clear();
    e = expand(cfg, "user+news@example.com");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"user+news@example.com"});
}

TEST_CASE("rewrite: a failing table refuses with 451 4.3.0, never passes", "[rewrite]") {
    RewriteConfig cfg;
    cfg.virtual_alias_maps = {"fail:"};
    auto e = expand(cfg, "a@x");
    CHECK(e.result.reply == "451 4.3.0 <a@x>: Temporary lookup failure");
    CHECK(e.rcpts.empty());
    // b@x, which the first table does not have, reaches the failing one.
    cfg.virtual_alias_maps = {"inline:{ a@x = b@x }", "fail:"};
    e = expand(cfg, "a@x");
    CHECK(e.result.reply == "451 4.3.0 <a@x>: Temporary lookup failure");
    cfg = {};
    cfg.sender_canonical_maps = {"fail:"};
    std::string s = "s@x";
    CHECK(Rewriter(cfg, smx::test::open_tables).sender(s).reply == "451 4.3.0 <s@x>: Temporary lookup failure");
    cfg = {};
    cfg.recipient_canonical_maps = {"fail:"};
    CHECK(expand(cfg, "a@x").result.reply == "451 4.3.0 <a@x>: Temporary lookup failure");
    cfg = {};
    cfg.virtual_alias_maps = {"fail:"};
    CHECK(Rewriter(cfg, smx::test::open_tables).virtual_alias("a@x") == smx::table::Status::failed);
}

TEST_CASE("rewrite: virtual alias keys are known recipients", "[rewrite]") {
    Rewriter rw(virtual_of("{ a@x = b@y }, { @catch.example = z@y }"), smx::test::open_tables);
    CHECK(rw.virtual_alias("A@X") == smx::table::Status::found);
    CHECK(rw.virtual_alias("anyone@catch.example") == smx::table::Status::found);
    CHECK(rw.virtual_alias("c@x") == smx::table::Status::not_found);
}

TEST_CASE("rewrite: aliases(5) for local domains", "[rewrite]") {
    RewriteConfig cfg;
    cfg.alias_maps = {"inline:{ postmaster = root, root = admin@example.com, ops = root bob }"};
    cfg.local_domains = {"mail.example.com"};
    cfg.recipient_delimiter = "+";
    auto e = expand(cfg, "postmaster@mail.example.com");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"admin@example.com"});
    CHECK(e.rcpts[0].params == "ORCPT=rfc822;postmaster@mail.example.com");
    // An unqualified name is in the alias's domain; bob has no alias. The
    // extension matched "ops" and is not carried over (as postfix's local).
    e = expand(cfg, "ops+x@mail.example.com");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"admin@example.com", "bob@mail.example.com"});
    // Another domain is not local: its local parts are not aliases.
    e = expand(cfg, "postmaster@example.org");
    REQUIRE(e.result.ok());
    CHECK(e.addrs() == std::vector<std::string>{"postmaster@example.org"});
}

TEST_CASE("rewrite: an alias to a command or file is refused (smx delivers to addresses)",
          "[rewrite]") {
    RewriteConfig cfg;
    cfg.alias_maps = {"inline:{ prog = \"|/usr/bin/procmail\", file = /var/mail/x }"};
    cfg.local_domains = {"h.example"};
    for (const char* a : {"prog@h.example", "file@h.example"}) {
        const auto e = expand(cfg, a);
        CHECK(e.result.reply.starts_with("451 4.3.5 <"));
        CHECK(e.result.warning.find("is not an address") != std::string::npos);
    }
}
