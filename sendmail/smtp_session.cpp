#include "sendmail/smtp_session.hpp"

#include "libsm/address.hpp"
#include "libsm/domain.hpp"
#include "libsm/ids.hpp"
#include "libsm/maildrop_file.hpp"

#include <poll.h>
#include <sysexits.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <set>

namespace smx::sendmail {
namespace {

enum class Read { ok, eof, timeout, too_long, error };

// Lines from a descriptor, each within a deadline; a line longer than the
// limit is read to its end and reported as too long.
class LineInput {
public:
    explicit LineInput(int fd) : fd_(fd) {}

    Read line(std::string& out, std::size_t max, std::chrono::seconds timeout) {
        out.clear();
        bool too_long = false;
        const auto deadline = std::chrono::steady_clock::now() + timeout;
        for (;;) {
            const auto nl = buf_.find('\n', at_);
            const std::size_t end = nl == std::string::npos ? buf_.size() : nl;
            const std::size_t take = std::min(end - at_, max + 1 - std::min(max + 1, out.size()));
            out.append(buf_, at_, take);
            if (out.size() > max) too_long = true;
            at_ = nl == std::string::npos ? buf_.size() : nl + 1;
            if (nl != std::string::npos) {
                if (!out.empty() && out.back() == '\r') out.pop_back();
                return too_long ? Read::too_long : Read::ok;
            }
            buf_.clear();
            at_ = 0;
            const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0) return Read::timeout;
            pollfd p{fd_, POLLIN, 0};
            const int r = ::poll(&p, 1, static_cast<int>(left.count()));
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) return Read::error;
            if (r == 0) return Read::timeout;
            char chunk[16384];
            const ssize_t n = ::read(fd_, chunk, sizeof chunk);
            if (n < 0 && errno == EINTR) continue;
            if (n < 0) return Read::error;
            // The last line without its LF still counts as one.
            if (n == 0) return out.empty() ? Read::eof : too_long ? Read::too_long : Read::ok;
            buf_.assign(chunk, static_cast<std::size_t>(n));
        }
    }

private:
    int fd_;
    std::string buf_;
    std::size_t at_ = 0;
};

class Session {
public:
    Session(int in, int out, const smx::Config& cfg, Local local, const Qualify& qualify,
            const Submit& submit)
        : in_(in), out_(out), cfg_(cfg.server), local_(std::move(local)), qualify_(qualify),
          submit_(submit) {}

    int run() {
        if (!reply("220 " + cfg_.hostname + " ESMTP smx (local submission)")) return EX_IOERR;
        std::string line;
        for (;;) {
            const Read r = in_.line(line, cfg_.max_line_length, cfg_.command_timeout);
            if (r == Read::eof) return EX_OK;
            if (r == Read::error) return EX_IOERR;
            if (r == Read::timeout) {
                reply("421 4.4.2 " + cfg_.hostname + " Error: timeout exceeded");
                return EX_TEMPFAIL;
            }
            if (r == Read::too_long) {
                if (!error("500 5.5.2 Error: line too long")) return EX_PROTOCOL;
                continue;
            }
            const auto sp = line.find(' ');
            const std::string verb = smx::upper(line.substr(0, sp));
            std::string_view arg;
            if (sp != std::string::npos) arg = std::string_view(line).substr(sp + 1);
            bool go_on = true;
            if (verb == "HELO" || verb == "EHLO") go_on = hello(verb == "EHLO");
            else if (verb == "MAIL") go_on = mail(arg);
            else if (verb == "RCPT") go_on = rcpt(arg);
            else if (verb == "DATA") go_on = data();
            else if (verb == "RSET") go_on = reset_reply();
            else if (verb == "NOOP") go_on = reply("250 2.0.0 Ok");
            else if (verb == "VRFY") go_on = reply("252 2.0.0 Send some mail, I'll try my best");
            else if (verb == "HELP") go_on = reply("214 2.0.0 Commands: HELO EHLO MAIL RCPT DATA RSET NOOP VRFY QUIT");
            else if (verb == "QUIT") return reply("221 2.0.0 Bye") ? EX_OK : EX_IOERR;
            else go_on = error("502 5.5.2 Error: command not recognized");
            if (!go_on) return closed_ ? EX_IOERR : EX_PROTOCOL;
        }
    }

private:
    bool reply(const std::string& r) {
        std::string out = r + "\r\n";
        for (std::string_view left = out; !left.empty();) {
            const ssize_t n = ::write(out_, left.data(), left.size());
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                closed_ = true;
                return false;
            }
            left.remove_prefix(static_cast<std::size_t>(n));
        }
        return true;
    }
    // An error reply; false (and 421) once there were max_errors.
    bool error(const std::string& r) {
        if (!reply(r)) return false;
        if (++errors_ < cfg_.max_errors) return true;
        reply("421 4.7.0 " + cfg_.hostname + " Error: too many errors");
        return false;
    }
    void reset() {
        in_mail_ = false;
        sender_.clear();
        rcpts_.clear();
        keys_.clear();
    }
    bool reset_reply() {
        reset();
        return reply("250 2.0.0 Ok");
    }

    bool hello(bool esmtp) {
        reset();
        if (!esmtp) return reply("250 " + cfg_.hostname);
        return reply("250-" + cfg_.hostname + "\r\n250-SIZE " +
                     std::to_string(cfg_.max_message_size) +
                     "\r\n250-8BITMIME\r\n250 ENHANCEDSTATUSCODES");
    }

    bool mail(std::string_view arg) {
        if (in_mail_) return error("503 5.5.1 Error: nested MAIL command");
        const auto p = smx::parse_path(arg, "FROM:");
        if (!p) return error("501 5.5.4 Syntax: MAIL FROM:<address>");
        const auto sender = qualify_(p->addr, true);
        if (!sender) return error("501 5.1.7 Bad sender address syntax");
        // SIZE= says at once what DATA would find.
        if (const auto at = smx::upper(p->params).find("SIZE="); at != std::string::npos) {
            const std::string n(p->params.substr(at + 5, p->params.find(' ', at) - at - 5));
            if (n.empty() || n.size() > 19 || n.find_first_not_of("0123456789") != std::string::npos)
                return error("501 5.5.4 Bad SIZE parameter");
            if (std::stoull(n) > cfg_.max_message_size)
                return reply("552 5.3.4 Error: message file too big");
        }
        in_mail_ = true;
        sender_ = *sender;
        return reply("250 2.1.0 Ok");
    }

    bool rcpt(std::string_view arg) {
        if (!in_mail_) return error("503 5.5.1 Error: need MAIL command");
        const auto p = smx::parse_path(arg, "TO:");
        if (!p) return error("501 5.5.4 Syntax: RCPT TO:<address>");
        const auto r = qualify_(p->addr, false);
        if (!r) return error("501 5.1.3 Bad recipient address syntax");
        std::string key = smx::address_key(*r);
        if (keys_.contains(key)) return reply("250 2.1.5 Ok");  // one copy, as SMTPS
        if (rcpts_.size() >= cfg_.max_recipients)
            return reply("452 4.5.3 Error: too many recipients");
        keys_.insert(std::move(key));
        rcpts_.push_back(*r);
        return reply("250 2.1.5 Ok");
    }

    bool data() {
        if (!in_mail_) return error("503 5.5.1 Error: need MAIL command");
        if (rcpts_.empty()) return error("554 5.5.1 Error: no valid recipients");
        if (!reply("354 End data with <CR><LF>.<CR><LF>")) return false;
        Collector c(cfg_.max_message_size);
        std::string line;
        for (;;) {
            // A long line is passed on whole: message lines are not limited.
            const Read r = in_.line(line, cfg_.max_message_size + 2, cfg_.data_timeout);
            if (r == Read::timeout) {
                reply("421 4.4.2 " + cfg_.hostname + " Error: timeout exceeded");
                return false;
            }
            if (r == Read::eof || r == Read::error) return false;
            if (line == ".") break;
            // A bare CR within the line ends one, as in the command's own input.
            c.bytes(line.starts_with('.') ? std::string_view(line).substr(1) : line, true);
            c.bytes("\n", true);
        }
        std::string verdict;
        Local l = local_;
        l.sender = sender_;
        l.now_us = smx::now_us();
        l.random = smx::maildrop::random_part();
        const Prepared p = prepare(c.lines(), l, false);
        if (c.too_big() || p.content.size() > cfg_.max_message_size) {
            verdict = "552 5.3.4 Error: message file too big";
        } else {
            const Queued q = submit_(sender_, rcpts_, p.content);
            if (q.status == EX_OK) verdict = "250 2.0.0 Ok: queued as " + q.name;
            else if (q.status == EX_TEMPFAIL) verdict = "452 4.3.1 " + q.error;
            else verdict = "451 4.3.0 " + q.error;
        }
        reset();
        return reply(verdict);
    }

    LineInput in_;
    int out_;
    const smx::ServerConfig& cfg_;
    const Local local_;
    const Qualify& qualify_;
    const Submit& submit_;
    bool closed_ = false;
    unsigned errors_ = 0;
    bool in_mail_ = false;
    std::string sender_;
    std::vector<std::string> rcpts_;
    std::set<std::string> keys_;
};

} // namespace

int smtp_session(int in, int out, const smx::Config& cfg, Local local, const Qualify& qualify,
                 const Submit& submit) {
    return Session(in, out, cfg, std::move(local), qualify, submit).run();
}

} // namespace smx::sendmail
