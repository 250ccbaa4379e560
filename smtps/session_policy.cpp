// A session's policy delegation steps (postfix's SMTPD_POLICY_README): the
// request with what the session knows, each service asked in turn.
#include "libsm/ids.hpp"
#include "smtps/session_state.hpp"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <iterator>

namespace smx::smtps {

asio::awaitable<Outcome> Session::ask_policy(PolicyFacts f) {
    const smx::PolicyConfig& pc = settings_->config->policy;
    if (f.stage != smx::PolicyStage::helo) {
        f.esmtp = esmtp_;
        f.helo = helo_;
    }
    if (f.stage != smx::PolicyStage::connect && f.stage != smx::PolicyStage::helo) f.sender = sender_;
    if (policy_instance_.empty()) policy_instance_ = smx::new_ta_id();
    boost::system::error_code ec;
    const auto local = stream_.socket().local_endpoint(ec);
    const std::string server_address = ec ? "" : client_ip(local);
    const std::string server_port = ec ? "" : std::to_string(local.port());
    const auto remote = stream_.socket().remote_endpoint(ec);
    const std::string client_port = ec ? "" : std::to_string(remote.port());
    f.queue_id = ta_id_;
    f.client_address = ip_;
    f.client_name = client_.name;
    f.client_port = client_port;
    f.server_address = server_address;
    f.server_port = server_port;
    f.instance = policy_instance_;
    if (stream_.tls()) {
        f.encryption_protocol = SSL_get_version(stream_.ssl());
        f.encryption_cipher = SSL_get_cipher_name(stream_.ssl());
        f.encryption_keysize = SSL_get_cipher_bits(stream_.ssl(), nullptr);
    }
    const std::string request = policy_request(f);
    const StageName where = stage_name(f, client());
    Outcome all;
    // As postfix's check_policy_service entries of one list: the first
    // that refuses or permits decides.
    for (const auto& service : pc.policy_services) {
        const auto answer = co_await policy_client_->ask(pc, service, request);
        Outcome o = restrictions_.policy(service.text, where.name, where.what,
                                         answer ? *answer : pc.policy_service_default_action,
                                         !answer);
        std::move(o.notes.begin(), o.notes.end(), std::back_inserter(all.notes));
        all.refusal = std::move(o.refusal);
        if (all.refusal || o.permit) break;
    }
    co_return all;
}

asio::awaitable<bool> Session::end_of_data_policy(const ContentWriter& w) {
    const std::size_t prepends = restrictions_.prepend().size();
    Outcome o = co_await ask_policy(PolicyFacts{.stage = smx::PolicyStage::end_of_data,
                                                .recipient_count = rcpts_.size(),
                                                .size = w.size()});
    // The headers are written: what a service asks to prepend now is late.
    if (restrictions_.prepend().size() != prepends)
        spdlog::warn("{}: PREPEND at end_of_data is not applied (the header is written before "
                     "the content; ask at rcpt or data)",
                     ta_id_);
    co_return passes(std::move(o), rcpts_.front().addr);
}

} // namespace smx::smtps
