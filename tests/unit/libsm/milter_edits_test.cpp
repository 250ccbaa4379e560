#include "libsm/milter_edits.hpp"

#include "tests/unit/libsm/failing_table.hpp"

#include <catch2/catch.hpp>

using namespace smx::milter;
namespace m = smx::milter;

namespace {
m::Reply edit(m::Act a, std::string name, std::string value, std::uint32_t index = 0) {
    m::Reply r;
    r.act = a;
    r.name = std::move(name);
    r.value = std::move(value);
    r.index = index;
    return r;
}
m::Reply addr_edit(m::Act a, std::string addr, std::string args = {}) {
    m::Reply r;
    r.act = a;
    r.addr = std::move(addr);
    r.args = std::move(args);
    return r;
}
} // namespace

TEST_CASE("milter header edits", "[milter]") {
    const std::vector<std::string> original = {"Received: from x\r\n\tby y\r\n",
                                               "Subject: one\r\n", "To: a@b\r\n",
                                               "subject: two\r\n"};
    auto fields = original;
    SECTION("add appends, insert goes to its index") {
        edit_headers(fields, {edit(m::Act::addheader, "X-Spam", "yes"),
                              edit(m::Act::insheader, "DKIM-Signature", "v=1;\n\tb=abc", 0),
                              edit(m::Act::insheader, "X-Late", "z", 99)});
        CHECK(fields == std::vector<std::string>{
                            "DKIM-Signature: v=1;\r\n\tb=abc\r\n", "Received: from x\r\n\tby y\r\n",
                            "Subject: one\r\n", "To: a@b\r\n", "subject: two\r\n",
                            "X-Spam: yes\r\n", "X-Late: z\r\n"});
    }
    SECTION("change picks the n-th field of the name, in any case; empty deletes") {
        edit_headers(fields, {edit(m::Act::chgheader, "SUBJECT", " second", 2)});
        CHECK(fields[3] == "SUBJECT: second\r\n");
        edit_headers(fields, {edit(m::Act::chgheader, "Subject", "", 1)});
        CHECK(fields == std::vector<std::string>{"Received: from x\r\n\tby y\r\n", "To: a@b\r\n",
                                                 "SUBJECT: second\r\n"});
        // Index 0 is 1, as sendmail has it.
        edit_headers(fields, {edit(m::Act::chgheader, "to", "c@d", 0)});
        CHECK(fields[1] == "to: c@d\r\n");
    }
    SECTION("change of a field that is not there adds it; deleting it does nothing") {
        edit_headers(fields, {edit(m::Act::chgheader, "X-New", "v", 1),
                              edit(m::Act::chgheader, "X-None", "", 1),
                              edit(m::Act::chgheader, "Subject", "v", 3)});
        CHECK(fields.size() == original.size() + 2);
        CHECK(fields[4] == "X-New: v\r\n");
        CHECK(fields[5] == "Subject: v\r\n");
    }
    SECTION("a name that only starts the same is another field") {
        edit_headers(fields, {edit(m::Act::chgheader, "Subj", "", 1)});
        CHECK(fields == original);
    }
}

TEST_CASE("milter body replacement", "[milter]") {
    CHECK_FALSE(replaced_body({edit(m::Act::addheader, "A", "b")}));
    m::Reply b;
    b.act = m::Act::replbody;
    b.text = "line one\nline two\r\nbare\rcr\r\n";
    const auto body = replaced_body({b});
    REQUIRE(body);
    CHECK(*body == "line one\r\nline two\r\nbare\r\ncr\r\n");
    b.text.clear();
    CHECK(replaced_body({b}) == std::string());
}

TEST_CASE("milter envelope edits", "[milter]") {
    Envelope env{"s@example.org", "SIZE=10", {{"a@Example.NET", ""}, {"b@example.net", "NOTIFY=NEVER"}}};
    edit_envelope(env, {addr_edit(m::Act::chgfrom, "<new@example.org>", "BODY=8BITMIME"),
                        addr_edit(m::Act::delrcpt, "<a@example.net>"),
                        addr_edit(m::Act::addrcpt, "<c@example.net>"),
                        addr_edit(m::Act::addrcpt_par, "d@example.net", "NOTIFY=SUCCESS"),
                        addr_edit(m::Act::addrcpt, "<b@EXAMPLE.net>")},
                  smx::Rewriter());
    CHECK(env.sender == "new@example.org");
    CHECK(env.params == "BODY=8BITMIME");
    REQUIRE(env.rcpts.size() == 3);
    CHECK((env.rcpts[0].addr == "b@example.net" && env.rcpts[0].params == "NOTIFY=NEVER"));
    CHECK((env.rcpts[1].addr == "c@example.net" && env.rcpts[1].params.empty()));
    CHECK((env.rcpts[2].addr == "d@example.net" && env.rcpts[2].params == "NOTIFY=SUCCESS"));
    edit_envelope(env, {addr_edit(m::Act::chgfrom, "<>")}, smx::Rewriter());
    CHECK(env.sender.empty());
    CHECK(env.params.empty());
}

TEST_CASE("milter envelope edits are rewritten as the envelope's own", "[milter]") {
    smx::RewriteConfig cfg;
    cfg.virtual_alias_maps = {"inline:{ { list@example.net = a@example.org, b@example.org } }"};
    cfg.sender_canonical_maps = {"inline:{ { old@example.org = new@example.org } }"};
    const smx::Rewriter rw(cfg, smx::test::open_tables);
    Envelope env{"s@example.org", "", {{"a@example.org", ""}}};
    const auto r = edit_envelope(env, {addr_edit(m::Act::addrcpt_par, "<list@example.net>",
                                                 "NOTIFY=SUCCESS"),
                                       addr_edit(m::Act::chgfrom, "<old@example.org>")},
                                 rw);
    CHECK(r.ok());
    CHECK(env.sender == "new@example.org");
    // a@ was there already: one copy; b@ with the parameters and the ORCPT
    // of what the milter added.
    REQUIRE(env.rcpts.size() == 2);
    CHECK(env.rcpts[0].addr == "a@example.org");
    CHECK(env.rcpts[1].addr == "b@example.org");
    CHECK(env.rcpts[1].params.find("NOTIFY=SUCCESS") != std::string::npos);
    CHECK(env.rcpts[1].params.find("ORCPT=rfc822;list@example.net") != std::string::npos);
    // A lookup that fails ends the edits with its reply.
    smx::RewriteConfig broken;
    broken.virtual_alias_maps = {"fail:"};
    const auto f = edit_envelope(env, {addr_edit(m::Act::addrcpt, "<x@example.net>")},
                                 smx::Rewriter(broken, smx::test::open_tables));
    CHECK(f.reply.starts_with("451 4.3.0"));
}
