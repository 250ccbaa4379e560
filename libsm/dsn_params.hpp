// The DSN extension's ESMTP parameters (RFC 3461): NOTIFY and ORCPT on RCPT,
// RET and ENVID on MAIL. SMTPS checks their syntax, QMGR honours them in its
// own DSNs and SMTPC passes them on to a next hop that offers DSN. They travel
// as received, in the TaCommit's params strings: this is the one parser.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace smx::dsn {

// RFC 3461 4.4 and 4.2: ENVID at most 100 characters, ORCPT at most 500
// (both after xtext encoding).
inline constexpr std::size_t max_envid = 100;
inline constexpr std::size_t max_orcpt = 500;
// RFC 3461 5: these parameters may make a MAIL command line up to 108 and a
// RCPT command line up to 500 characters longer than the usual limit.
inline constexpr std::size_t mail_line_extra = 108;
inline constexpr std::size_t rcpt_line_extra = 500;

// xtext (RFC 3461 4): printable US-ASCII except '+' and '=', and "+XX" with
// two upper-case hex digits for any other byte.
bool valid_xtext(std::string_view s);
// Decodes valid xtext (call valid_xtext first; bad "+" escapes stay as they are).
std::string xtext_decode(std::string_view s);
// s as xtext.
std::string xtext_encode(std::string_view s);

// The value of `keyword` (case-insensitive) in a parameter string
// "KEY=VALUE KEY2 ..." as received; nullopt when absent.
std::optional<std::string_view> param(std::string_view params, std::string_view keyword);

// One RCPT or MAIL parameter "KEY=VALUE": an error reply for bad DSN syntax
// ("501 5.5.4 ..."), empty when it is valid. Only for NOTIFY and ORCPT (rcpt)
// or RET and ENVID (mail); is_rcpt_param / is_mail_param say which those are.
bool is_rcpt_param(std::string_view kv);
bool is_mail_param(std::string_view kv);
std::string check(std::string_view kv);
// All DSN parameters of a MAIL (rcpt false: others are left to the caller)
// or RCPT (rcpt true: anything else is "555 5.5.4 Unsupported option")
// parameter string, each at most once: an error reply, or empty.
std::string check_params(std::string_view params, bool rcpt);
// The refusal of a MAIL or RCPT parameter nobody here knows, the client's
// text echoed printable (smx::smtp::printable).
std::string unsupported_option(std::string_view kv);

// NOTIFY as a set; a recipient without NOTIFY gets failure and delay
// notices (RFC 3461 4.1: the MTA's default), never a success notice.
struct Notify {
    bool success = false, failure = true, delay = true;
    bool given = false;  // the client said NOTIFY=
};
Notify notify(std::string_view rcpt_params);
// RET=HDRS asked for (RFC 3461 4.3); absent or FULL: false.
bool ret_hdrs(std::string_view mail_params);
// RET=FULL asked for.
bool ret_full(std::string_view mail_params);

// The parameters passed on to a next hop that offers DSN, in the order
// received: RET and ENVID of MAIL, NOTIFY and ORCPT of RCPT (" KEY=VALUE"
// each, empty when none).
std::string pass_on_mail(std::string_view mail_params);
std::string pass_on_rcpt(std::string_view rcpt_params);

} // namespace smx::dsn
