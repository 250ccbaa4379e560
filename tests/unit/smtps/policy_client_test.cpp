// The policy delegation protocol's encoding (smtps/policy_client.hpp and
// smtps/policy_request.hpp): requests as postfix sends them, answers as
// postfix reads them.
#include "smtps/policy_client.hpp"
#include "smtps/policy_request.hpp"

#include <catch2/catch.hpp>

using namespace smx::smtps;
using Status = PolicyReply::Status;

TEST_CASE("a request is name=value lines and an empty line; no value can end a line") {
    CHECK(encode_policy_request({{"request", "smtpd_access_policy"}, {"helo_name", ""}}) ==
          "request=smtpd_access_policy\nhelo_name=\n\n");
    CHECK(encode_policy_request({{"sender", "a\nrecipient=x@y\r\n\nb"}, {"n", std::string("a\0b", 3)}}) ==
          "sender=a?recipient=x@y???b\nn=a?b\n\n");
}

TEST_CASE("a stage's request carries postfix's attributes") {
    PolicyFacts f;
    f.stage = smx::PolicyStage::rcpt;
    f.esmtp = true;
    f.helo = "client.test";
    f.sender = "s@a.test";
    f.recipient = "r@b.test";
    f.recipient_count = 2;
    f.client_address = "192.0.2.1";
    f.client_name = "mx.a.test";
    f.instance = "abc";
    f.queue_id = "Q1";
    f.size = 1234;
    const std::string r = policy_request(f);
    for (const char* line :
         {"request=smtpd_access_policy\n", "protocol_state=RCPT\n", "protocol_name=ESMTP\n",
          "helo_name=client.test\n", "queue_id=Q1\n", "sender=s@a.test\n", "recipient=r@b.test\n",
          "recipient_count=2\n", "client_address=192.0.2.1\n", "client_name=mx.a.test\n",
          "reverse_client_name=mx.a.test\n", "instance=abc\n", "size=1234\n",
          "encryption_keysize=0\n", "etrn_domain=\n", "sasl_username=\n", "ccert_subject=\n"})
        CHECK(r.find(line) != std::string::npos);
    CHECK(r.starts_with("request=smtpd_access_policy\n"));
    CHECK(r.ends_with("\n\n"));
    CHECK(r.find("\n\n") == r.size() - 2);
    f.stage = smx::PolicyStage::end_of_data;
    CHECK(policy_request(f).find("protocol_state=END-OF-MESSAGE\n") != std::string::npos);
    CHECK(stage_name(f, "c[1.2.3.4]").name == "END-OF-MESSAGE");
    f.stage = smx::PolicyStage::connect;
    CHECK(stage_name(f, "c[1.2.3.4]").name == "c[1.2.3.4]");
    CHECK(stage_name(f, "c[1.2.3.4]").what == "Client host");
}

TEST_CASE("an answer is action=... and an empty line; anything else is malformed") {
    CHECK(parse_policy_reply("").status == Status::incomplete);
    CHECK(parse_policy_reply("action=DUN").status == Status::incomplete);
    CHECK(parse_policy_reply("action=DUNNO\n").status == Status::incomplete);
    auto r = parse_policy_reply("action=DEFER_IF_PERMIT Greylisted, see x\n\n");
    CHECK(r.status == Status::done);
    CHECK(r.action == "DEFER_IF_PERMIT Greylisted, see x");
    // CRLF line ends and other attributes are taken.
    r = parse_policy_reply("foo=bar\r\naction=OK\r\n\r\n");
    CHECK(r.status == Status::done);
    CHECK(r.action == "OK");
    CHECK(parse_policy_reply("\n").status == Status::malformed);
    CHECK(parse_policy_reply("foo=bar\n\n").status == Status::malformed);
    CHECK(parse_policy_reply("garbage\n\n").status == Status::malformed);
    CHECK(parse_policy_reply("=x\n").status == Status::malformed);
    CHECK(parse_policy_reply("action=OK\naction=REJECT\n\n").status == Status::malformed);
    CHECK(parse_policy_reply("action=OK\n\naction=REJECT\n\n").status == Status::malformed);
}
