// A session's milter steps (docs/milter.md): the chain made at connect,
// each SMTP stage's verdict, the content at its end and the edits applied
// before the commit.
#include "libsm/domain.hpp"
#include "libsm/milter_edits.hpp"
#include "smtps/session_state.hpp"

#include <openssl/ssl.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

namespace smx::smtps {

std::optional<std::string> Session::macro(std::string_view name) {
    // Asked for only where a macro needs it: a system call per lookup
    // otherwise (32 per message with every stage's macros).
    boost::system::error_code ec;
    if (name == "j" || name == "daemon_name") return cfg_.hostname;
    if (name == "v") return std::string("smx");
    if (name == "_") return client_.name + " [" + ip_ + "]";
    if (name == "client_addr") return ip_;
    if (name == "client_name" || name == "client_ptr") return client_.name;
    if (name == "client_port") {
        const auto remote = stream_.socket().remote_endpoint(ec);
        if (!ec) return std::to_string(remote.port());
        return std::nullopt;
    }
    if (name == "daemon_addr" || name == "if_addr" || name == "daemon_port") {
        const auto local = stream_.socket().local_endpoint(ec);
        if (ec) return std::nullopt;
        if (name == "daemon_port") return std::to_string(local.port());
        return local.address().to_string();
    }
    if (name == "i") {
        if (!ta_id_.empty()) return ta_id_;
        return std::nullopt;
    }
    if (stream_.tls()) {
        SSL* ssl = stream_.ssl();
        if (name == "tls_version") return std::string(SSL_get_version(ssl));
        if (name == "cipher") return std::string(SSL_get_cipher_name(ssl));
        if (name == "cipher_bits") return std::to_string(SSL_get_cipher_bits(ssl, nullptr));
    }
    if (have_sender_) {
        if (name == "mail_addr") return sender_;
        if (name == "mail_host") return std::string(smx::domain_part(sender_));
        if (name == "mail_mailer") return std::string("smtp");
    }
    if (!milter_rcpt_.empty()) {
        if (name == "rcpt_addr") return milter_rcpt_;
        if (name == "rcpt_host") return std::string(smx::domain_part(milter_rcpt_));
        if (name == "rcpt_mailer") return std::string("smtp");
    }
    return std::nullopt;
}

asio::awaitable<void> Session::milter_connect() {
    const auto& mc = settings_->config->milter;
    boost::system::error_code ec;
    const auto local = stream_.socket().local_endpoint(ec);
    const auto remote = stream_.socket().remote_endpoint(ec);
    if (ec) co_return;
    // The listener's own list: its address, or its wildcard address.
    const auto port = std::to_string(local.port());
    const auto& list = [&]() -> const std::vector<MilterEntry>& {
        for (const std::string& key :
             {smx::HostPort{local.address().to_string(), local.port(), false}.address(),
              "0.0.0.0:" + port, "[::]:" + port})
            if (mc.listener_milters.count(key)) return mc.listener_milters.at(key);
        return mc.smtpd_milters;
    }();
    if (list.empty()) co_return;
    milters_ = std::make_unique<Milters>(stream_.socket().get_executor(), mc, list,
                                         [this](std::string_view n) { return macro(n); },
                                         *milter_failures_);
    const auto family =
        remote.address().is_v4() ? smx::milter::Family::inet : smx::milter::Family::inet6;
    // sendmail's form of a client without a name.
    const std::string host = client_.name == "unknown" ? "[" + ip_ + "]" : client_.name;
    const MilterVerdict v = co_await milters_->connect(host, family, remote.port(), ip_);
    if (v.refused()) milter_refusal_ = v.reply;
}

bool Session::milter_passes(const MilterVerdict& v, std::string_view to) {
    if (v.refused()) {
        log_.milter_reject(v.reply, details(to));
        reply(v.reply);
        return false;
    }
    if (!v.hold.empty()) milter_hold_ = v.hold;
    if (v.kind == MilterVerdict::discard) milter_discard_ = true;
    return true;
}

asio::awaitable<void> Session::milter_mail() {
    if (milters_) {
        milter_in_message_ = true;
        const MilterVerdict v =
            co_await milters_->mail(smx::milter::command_args(sender_, mail_params_));
        if (!milter_passes(v)) {
            in_mail_ = false;
            co_return;
        }
    }
    reply("250 2.1.0 Ok");
}

asio::awaitable<bool> Session::milter_rcpt(const std::string& addr, const std::string& params) {
    milter_rcpt_ = addr;
    const MilterVerdict v = co_await milters_->rcpt(smx::milter::command_args(addr, params));
    co_return milter_passes(v, addr);
}

asio::awaitable<bool> Session::milter_message(ContentWriter& w) {
    if (!milters_ || !milter_in_message_) co_return true;
    const std::string to = rcpts_.front().addr;
    const ContentSource src = w.source();
    auto read = [&src](std::uint64_t at, std::string& piece) {
        return src.read_at(at, 65536, piece);
    };
    auto m = co_await milters_->message(read, cfg_.max_message_size);
    if (m.ended) milter_in_message_ = false;
    if (m.read_failed) {
        spdlog::error("{}: cannot read the content back for the milters: {}", ta_id_,
                      std::strerror(errno));
        const std::string r = "451 4.3.0 Error: queue file read error";
        log_.reject(smx::Rejection::queue_unavailable, r, details(to));
        reply(r);
        co_return false;
    }
    const MilterVerdict& v = m.verdict;
    if (!milter_passes(v, to)) co_return false;
    if (milter_discard_) {
        log_.note("milter-discard", "milter triggers DISCARD action", details(to));
        reply("250 2.0.0 Ok: queued as " + ta_id_);
        co_return false;
    }
    if (v.edits.empty()) co_return true;
    const std::string err = apply_milter_edits(w, m.fields, m.blank_line, v.edits);
    if (err.empty()) co_return true;
    log_.milter_reject(err, details(to));
    reply(err);
    co_return false;
}

std::string Session::apply_milter_edits(ContentWriter& w, const std::vector<std::string>& fields,
                                        bool blank_line,
                                        const std::vector<smx::milter::Reply>& edits) {
    smx::milter::Envelope env{sender_, mail_params_, rcpts_};
    if (const auto r = smx::milter::edit_envelope(env, edits, settings_->rewrite); !r.ok()) {
        if (!r.warning.empty()) spdlog::warn("{}: {}", ta_id_, r.warning);
        return r.reply;
    }
    if (env.rcpts.empty()) return "554 5.7.1 Error: the milters removed every recipient";
    if (smx::msg::envelope_size(env.sender, env.params, helo_, env.rcpts) > smx::msg::max_envelope)
        return "452 4.5.3 Error: too many recipients (the milters' envelope is too large)";
    sender_ = std::move(env.sender);
    mail_params_ = std::move(env.params);
    rcpts_ = std::move(env.rcpts);
    if (!smx::milter::edits_content(edits)) return {};
    std::uint64_t header_bytes = blank_line ? 2 : 0;
    for (const auto& f : fields) header_bytes += f.size();
    std::vector<std::string> edited = fields;
    smx::milter::edit_headers(edited, edits);
    const auto body = smx::milter::replaced_body(edits);
    // The edited copy goes where the message was; the original is read
    // from what the writer handed over.
    const TakenContent old = w.take_content();
    const ContentSource src = old.source();
    for (const auto& f : edited) w.append(f);
    if (blank_line || body) w.append("\r\n");
    if (body) {
        w.append(*body);
        return {};
    }
    std::string piece;
    for (std::uint64_t at = header_bytes;; at += piece.size()) {
        if (!src.read_at(at, 65536, piece)) {
            spdlog::error("{}: cannot read the content back for the milters' edits: {}", ta_id_,
                          std::strerror(errno));
            return "451 4.3.0 Error: queue file read error";
        }
        if (piece.empty()) return {};
        w.append(piece);
    }
}

} // namespace smx::smtps
