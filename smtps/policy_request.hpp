// What SMTPS tells a policy service of a session (postfix's
// SMTPD_POLICY_README attributes), and where in a stage's reply its answer
// names the thing refused.
#pragma once

#include "libsm/config.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace smx::smtps {

// The session as a stage sees it; empty: not known (yet).
struct PolicyFacts {
    smx::PolicyStage stage = smx::PolicyStage::rcpt;
    bool esmtp = false;
    std::string_view helo{}, queue_id{}, sender{}, recipient{};
    std::size_t recipient_count = 0;  // taken so far; at DATA and end of data all
    std::string_view client_address{}, client_name{}, client_port{};
    std::string_view server_address{}, server_port{};
    std::string_view instance{};  // one value for the requests of a transaction
    std::uint64_t size = 0;     // MAIL's SIZE=, or the content's at end of data
    std::string_view encryption_protocol{}, encryption_cipher{};
    int encryption_keysize = 0;
};

// The request as sent (encode_policy_request).
std::string policy_request(const PolicyFacts& f);

// How a stage's refusal names what it refused: "<name>: <what> rejected".
struct StageName {
    std::string name;       // "u@x", "DATA"
    std::string_view what;  // "Recipient address", "Data command"
};
// client: "name[ip]", the connect stage's name.
StageName stage_name(const PolicyFacts& f, std::string_view client);

} // namespace smx::smtps
