#include "smtps/policy_request.hpp"

#include "libsm/panic.hpp"
#include "smtps/policy_client.hpp"

namespace smx::smtps {
namespace {

std::string_view protocol_state(const PolicyFacts& f) {
    switch (f.stage) {
    case smx::PolicyStage::connect: return "CONNECT";
    case smx::PolicyStage::helo: return f.esmtp ? "EHLO" : "HELO";
    case smx::PolicyStage::mail: return "MAIL";
    case smx::PolicyStage::rcpt: return "RCPT";
    case smx::PolicyStage::data: return "DATA";
    case smx::PolicyStage::end_of_data: return "END-OF-MESSAGE";
    }
    smx::panic("policy_request: a stage without a name");
}

} // namespace

std::string policy_request(const PolicyFacts& f) {
    const bool tls = !f.encryption_protocol.empty();
    // The sender as postfix sends it: empty for the null sender.
    const PolicyAttributes attrs{
        {"request", "smtpd_access_policy"},
        {"protocol_state", std::string(protocol_state(f))},
        {"protocol_name", f.esmtp ? "ESMTP" : "SMTP"},
        {"helo_name", std::string(f.helo)},
        {"queue_id", std::string(f.queue_id)},
        {"sender", std::string(f.sender)},
        {"recipient", std::string(f.recipient)},
        {"recipient_count", std::to_string(f.recipient_count)},
        {"client_address", std::string(f.client_address)},
        {"client_name", std::string(f.client_name)},
        // smx keeps the confirmed name only: an unconfirmed PTR is "unknown"
        // here, as client_name.
        {"reverse_client_name", std::string(f.client_name)},
        {"client_port", std::string(f.client_port)},
        {"instance", std::string(f.instance)},
        {"sasl_method", ""},
        {"sasl_username", ""},
        {"sasl_sender", ""},
        {"size", std::to_string(f.size)},
        {"ccert_subject", ""},
        {"ccert_issuer", ""},
        {"ccert_fingerprint", ""},
        {"ccert_pubkey_fingerprint", ""},
        {"encryption_protocol", std::string(f.encryption_protocol)},
        {"encryption_cipher", std::string(f.encryption_cipher)},
        {"encryption_keysize", tls ? std::to_string(f.encryption_keysize) : "0"},
        {"etrn_domain", ""},
        {"stress", ""},
        {"server_address", std::string(f.server_address)},
        {"server_port", std::string(f.server_port)},
        {"policy_context", ""},
        {"compatibility_level", "3.6"},
        {"mail_version", "smx " SMX_VERSION},
    };
    return encode_policy_request(attrs);
}

StageName stage_name(const PolicyFacts& f, std::string_view client) {
    switch (f.stage) {
    case smx::PolicyStage::connect: return {std::string(client), "Client host"};
    case smx::PolicyStage::helo: return {std::string(f.helo), "Helo command"};
    case smx::PolicyStage::mail: return {std::string(f.sender), "Sender address"};
    case smx::PolicyStage::rcpt: return {std::string(f.recipient), "Recipient address"};
    case smx::PolicyStage::data: return {"DATA", "Data command"};
    case smx::PolicyStage::end_of_data: return {"END-OF-MESSAGE", "End-of-data"};
    }
    smx::panic("stage_name: a stage without a name");
}

} // namespace smx::smtps
