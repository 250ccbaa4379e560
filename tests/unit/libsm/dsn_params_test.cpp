// The RFC 3461 parameter parser (libsm/dsn_params).
#include "libsm/dsn_params.hpp"

#include <catch2/catch.hpp>

namespace dsn = smx::dsn;

TEST_CASE("dsn params: xtext") {
    CHECK(dsn::valid_xtext(""));
    CHECK(dsn::valid_xtext("abc+2Bdef+3D"));
    CHECK(dsn::valid_xtext("!~"));
    CHECK_FALSE(dsn::valid_xtext("a=b"));    // '=' must be encoded
    CHECK_FALSE(dsn::valid_xtext("a b"));    // so must a space
    CHECK_FALSE(dsn::valid_xtext("a+2"));    // short escape
    CHECK_FALSE(dsn::valid_xtext("a+2b"));   // lower-case hex
    CHECK_FALSE(dsn::valid_xtext("a+"));
    CHECK_FALSE(dsn::valid_xtext("\xc3\xa9"));  // 8-bit
    CHECK(dsn::xtext_decode("a+2Bb+3D+40") == "a+b=@");
    CHECK(dsn::xtext_decode("plain") == "plain");
}

TEST_CASE("dsn params: each parameter's syntax") {
    for (const char* ok : {"NOTIFY=NEVER", "notify=never", "NOTIFY=SUCCESS", "NOTIFY=FAILURE,DELAY",
                           "NOTIFY=DELAY,SUCCESS,FAILURE", "ORCPT=rfc822;bob@example.net",
                           "ORCPT=rfc822;b+2Bo@example.net", "RET=FULL", "ret=hdrs", "ENVID=QQ314159",
                           "ENVID=a+2Bb"})
        CHECK(dsn::check(ok).empty());
    CHECK(dsn::check("NOTIFY=NEVER,SUCCESS") == "501 5.5.4 Bad NOTIFY parameter syntax");  // NEVER alone
    CHECK_FALSE(dsn::check("NOTIFY=").empty());
    CHECK_FALSE(dsn::check("NOTIFY").empty());
    CHECK_FALSE(dsn::check("NOTIFY=SUCCESS,SUCCESS").empty());
    CHECK_FALSE(dsn::check("NOTIFY=SUCCESS,").empty());
    CHECK_FALSE(dsn::check("NOTIFY=ALWAYS").empty());
    CHECK(dsn::check("ORCPT=bob@example.net") == "501 5.5.4 Bad ORCPT parameter syntax");  // no type
    CHECK_FALSE(dsn::check("ORCPT=rfc822;").empty());
    CHECK_FALSE(dsn::check("ORCPT=;bob@example.net").empty());
    CHECK_FALSE(dsn::check("ORCPT=rfc 822;bob").empty());
    CHECK_FALSE(dsn::check("ORCPT=rfc822;a=b").empty());
    CHECK(dsn::check("RET=BODY") == "501 5.5.4 Bad RET parameter syntax");
    CHECK_FALSE(dsn::check("RET=").empty());
    CHECK(dsn::check("ENVID=") == "501 5.5.4 Bad ENVID parameter syntax");
    CHECK_FALSE(dsn::check("ENVID=a=b").empty());
}

TEST_CASE("dsn params: the limits of ENVID (100) and ORCPT (500)") {
    CHECK(dsn::check("ENVID=" + std::string(dsn::max_envid, 'x')).empty());
    CHECK_FALSE(dsn::check("ENVID=" + std::string(dsn::max_envid + 1, 'x')).empty());
    const std::string type = "rfc822;";
    CHECK(dsn::check("ORCPT=" + type + std::string(dsn::max_orcpt - type.size(), 'x')).empty());
    CHECK_FALSE(dsn::check("ORCPT=" + type + std::string(dsn::max_orcpt - type.size() + 1, 'x')).empty());
}

TEST_CASE("dsn params: a whole MAIL or RCPT parameter string") {
    CHECK(dsn::check_params("NOTIFY=SUCCESS ORCPT=rfc822;a@b", true).empty());
    CHECK(dsn::check_params("", true).empty());
    CHECK(dsn::check_params("FOO=1", true) == "555 5.5.4 Unsupported option: FOO=1");
    CHECK(dsn::check_params("NOTIFY=NEVER notify=SUCCESS", true) == "501 5.5.4 Duplicate notify parameter");
    CHECK(dsn::check_params("NOTIFY=BAD", true) == "501 5.5.4 Bad NOTIFY parameter syntax");
    // On MAIL the others (SIZE, BODY, SMTPUTF8) are SMTPS's to judge.
    CHECK(dsn::check_params("SIZE=10 RET=HDRS ENVID=x BODY=8BITMIME", false).empty());
    CHECK(dsn::check_params("RET=HDRS RET=FULL", false) == "501 5.5.4 Duplicate RET parameter");
    CHECK_FALSE(dsn::check_params("ENVID=a=b", false).empty());
    // NOTIFY on MAIL is not a MAIL parameter: SMTPS refuses it as unknown.
    CHECK_FALSE(dsn::is_mail_param("NOTIFY=NEVER"));
}

TEST_CASE("dsn params: NOTIFY and RET as QMGR reads them") {
    auto n = dsn::notify("");
    CHECK_FALSE(n.given);
    CHECK((n.failure && n.delay && !n.success));  // the default
    n = dsn::notify("ORCPT=rfc822;a@b NOTIFY=NEVER");
    CHECK((n.given && !n.failure && !n.delay && !n.success));
    n = dsn::notify("NOTIFY=SUCCESS,DELAY");
    CHECK((n.success && n.delay && !n.failure));
    CHECK(dsn::ret_hdrs("SIZE=1 RET=HDRS"));
    CHECK_FALSE(dsn::ret_full("SIZE=1 RET=HDRS"));
    CHECK(dsn::ret_full("ret=full"));
    CHECK_FALSE(dsn::ret_full(""));
    CHECK(dsn::param("SIZE=1 BODY=8BITMIME", "body") == "8BITMIME");
    CHECK_FALSE(dsn::param("SIZE=1", "BODY"));
}

TEST_CASE("dsn params: what goes on to a next hop that offers DSN") {
    CHECK(dsn::pass_on_mail("SIZE=100 BODY=8BITMIME RET=HDRS SMTPUTF8 ENVID=QQ+2B1") ==
          " RET=HDRS ENVID=QQ+2B1");
    CHECK(dsn::pass_on_mail("SIZE=100") == "");
    CHECK(dsn::pass_on_rcpt("NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;a+2Bb@c") ==
          " NOTIFY=SUCCESS,FAILURE ORCPT=rfc822;a+2Bb@c");
    CHECK(dsn::pass_on_rcpt("") == "");
}
