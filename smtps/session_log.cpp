#include "smtps/session_log.hpp"

#include "libsm/log.hpp"

#include <spdlog/spdlog.h>

namespace smx::smtps {
namespace {

// The order of postfix's disconnect line.
constexpr Verb summary_order[] = {Verb::helo, Verb::ehlo, Verb::starttls, Verb::mail,
                                  Verb::rcpt, Verb::bdat,  Verb::data,     Verb::rset,
                                  Verb::noop, Verb::vrfy,  Verb::help,     Verb::quit,
                                  Verb::unknown};

std::size_t index(Verb v) { return static_cast<std::size_t>(v); }

// The reply code our own reply begins with.
unsigned reply_code(std::string_view reply) {
    unsigned code = 0;
    for (std::size_t i = 0; i < 3 && i < reply.size() && reply[i] >= '0' && reply[i] <= '9'; ++i)
        code = code * 10 + static_cast<unsigned>(reply[i] - '0');
    return code;
}

} // namespace

SessionLog::SessionLog(std::string ip, std::shared_ptr<smx::RejectionCounts> counts)
    : ip_(std::move(ip)), client_("unknown[" + ip_ + "]"), counts_(std::move(counts)) {}

void SessionLog::connected() const { spdlog::info("connect from {}", client_); }

void SessionLog::command(Verb v) {
    current_ = v;
    current_failed_ = false;
    where_ = verb_name(v);
    ++given_[index(v)];
}

void SessionLog::recipient_taken(const std::string& ta_id) {
    if (queue_id_ == ta_id) return;
    queue_id_ = ta_id;
    spdlog::info("{}: client={}", ta_id, client_);
}

void SessionLog::reject(smx::Rejection why, std::string_view reply, std::string_view details) {
    refused("reject", why, reply, details);
}

void SessionLog::milter_reject(std::string_view reply, std::string_view details) {
    // A multi-line reply on one log line.
    std::string line(reply);
    for (std::size_t at; (at = line.find("\r\n")) != std::string::npos;) line.replace(at, 2, " ");
    refused("milter-reject", smx::Rejection::milter, line, details);
}

void SessionLog::error(smx::Rejection why, std::string_view reply, std::string_view details) {
    refused("error", why, reply, details);
}

void SessionLog::check_refused(smx::Rejection why, std::string_view reply) {
    counts_->add(why, reply_code(reply));
    if (given_[index(current_)] && !current_failed_) {
        ++failed_[index(current_)];
        current_failed_ = true;
    }
}

void SessionLog::refused(std::string_view kind, smx::Rejection why, std::string_view reply,
                         std::string_view details) {
    check_refused(why, reply);
    spdlog::info("{}: {}: {} from {}: {}; {}", queue_id_, kind, where_, client_, reply, details);
}

void SessionLog::note(std::string_view kind, std::string_view text, std::string_view details) const {
    spdlog::info("{}: {}: {} from {}: {}; {}", queue_id_, kind, where_, client_, text, details);
}

void SessionLog::check(const CheckEvent& e, std::string_view details) const {
    if (e.action == "unsupported" || e.action == "failed") {
        spdlog::warn("{}: {}_checks: {} {}: {}", queue_id_, e.what, e.what, e.content, e.text);
        return;
    }
    smx::log_as(smx::LogAs::cleanup)
        .info("{}: {}: {} {} from {}; {}{}{}", queue_id_, e.action, e.what, e.content, client_,
              details, e.text.empty() ? "" : ": ", e.text);
}

void SessionLog::too_many_errors() {
    counts_->add(smx::Rejection::too_many_errors, 421);
    spdlog::info("too many errors after {} from {}", where_, client_);
}

std::string SessionLog::after(std::optional<std::uint64_t> bytes) const {
    std::string s(where_);
    if (bytes) s += " (" + std::to_string(*bytes) + " bytes)";
    return s;
}

void SessionLog::timeout(std::optional<std::uint64_t> bytes) {
    counts_->add(smx::Rejection::timeout, 421);
    spdlog::info("timeout after {} from {}", after(bytes), client_);
}

void SessionLog::lost(std::optional<std::uint64_t> bytes) const {
    spdlog::info("lost connection after {} from {}", after(bytes), client_);
}

void SessionLog::disconnected() const {
    std::string line = "disconnect from " + client_;
    unsigned given = 0, failed = 0;
    for (Verb v : summary_order) {
        const unsigned n = given_[index(v)], bad = failed_[index(v)];
        if (!n) continue;
        std::string name(verb_name(v));
        for (char& c : name) c = static_cast<char>(c - 'A' + 'a');
        line += " " + name + "=" + (bad ? std::to_string(n - bad) + "/" : "") + std::to_string(n);
        given += n;
        failed += bad;
    }
    line += " commands=" + (failed ? std::to_string(given - failed) + "/" : "") + std::to_string(given);
    spdlog::info("{}", line);
}

} // namespace smx::smtps
