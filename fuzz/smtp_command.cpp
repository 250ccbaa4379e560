// The SMTP command parser: verb, BDAT size, MAIL/RCPT path and parameters, address
// syntax (ASCII and SMTPUTF8), routing in the local part, the DSN parameters. Every line of the input is a command.
#include "libsm/domain.hpp"
#include "libsm/dsn_params.hpp"
#include "smtps/command.hpp"
#include "smtps/policy.hpp"

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    while (!in.empty()) {
        const auto nl = in.find('\n');
        const std::string_view line = in.substr(0, nl);
        in.remove_prefix(nl == std::string_view::npos ? in.size() : nl + 1);
        std::string_view arg;
        const smx::smtps::Verb v = smx::smtps::parse_verb(line, arg);
        if (arg.size() > line.size()) std::abort();
        if (v == smx::smtps::Verb::bdat) {
            // A size is taken only when all of it is digits that fit.
            const auto b = smx::smtps::parse_bdat(arg);
            if (b && arg.substr(0, arg.find(' ')).size() > 19) std::abort();
            continue;
        }
        if (v != smx::smtps::Verb::mail && v != smx::smtps::Verb::rcpt) continue;
        const auto p = smx::smtps::parse_path(arg, v == smx::smtps::Verb::mail ? "FROM:" : "TO:");
        if (!p) continue;
        if (smx::smtps::valid_address(p->addr, v == smx::smtps::Verb::mail)) {
            // What SMTPS passes on must be safe to put into a command line.
            if (p->addr.find_first_of("\r\n<>") != std::string_view::npos) std::abort();
            if (p->addr.size() > 254) std::abort();
        }
        // With SMTPUTF8 the address must still be safe, and well-formed UTF-8.
        if (smx::smtps::valid_address(p->addr, v == smx::smtps::Verb::mail, true)) {
            if (p->addr.find_first_of("\r\n<>") != std::string_view::npos) std::abort();
            if (!smx::smtps::valid_utf8(p->addr)) std::abort();
        }
        (void)smx::smtps::routes_in_local_part(p->addr);
        (void)smx::domain_of(p->addr);
        // DSN parameters (RFC 3461) that pass the check go on to a next hop:
        // they must be safe on a command line, and their xtext must decode.
        const bool rcpt = v == smx::smtps::Verb::rcpt;
        const std::string err = smx::dsn::check_params(p->params, rcpt);
        // A refusal goes back to the client as one reply line.
        if (err.find_first_of(std::string_view("\r\n\0", 3)) != std::string::npos) std::abort();
        if (err.empty()) {
            const std::string on = rcpt ? smx::dsn::pass_on_rcpt(p->params) : smx::dsn::pass_on_mail(p->params);
            if (on.find_first_of("\r\n") != std::string::npos || on.size() > p->params.size() + 1) std::abort();
            if (auto envid = smx::dsn::param(p->params, "ENVID");
                envid && smx::dsn::xtext_decode(*envid).size() > smx::dsn::max_envid)
                std::abort();
            (void)smx::dsn::notify(p->params);
        }
    }
    return 0;
}
