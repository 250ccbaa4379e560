#include "smtpc/session.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <spdlog/spdlog.h>

#include "libsm/domain.hpp"
#include "libsm/dsn_params.hpp"
#include "libsm/tls.hpp"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <sstream>

namespace smx::smtpc {
namespace {

using namespace std::chrono_literals;
using smx::smtp::ReadStatus;

constexpr std::size_t body_block = 64 * 1024;

void set_result(smx::msg::RcptResult& r, const Failure& f) {
    r.code = f.code;
    r.enhanced = f.enhanced;
    r.text = f.text;
}

// Addresses go into command lines: a CR or LF would inject commands.
bool clean_address(const std::string& a) {
    return a.find_first_of("\r\n<>", 0, 5) == std::string::npos;
}

// "[ip]:port" for literal targets, "host[ip]:port" otherwise.
std::string connect_label(const Target& t) {
    const std::string ip = t.ep.address().to_string();
    if (t.host == ip) return "[" + ip + "]:" + std::to_string(t.ep.port());
    return t.relay();
}

std::string base64(std::string_view in) {
    std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');  // EVP_EncodeBlock adds a NUL
    const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                  reinterpret_cast<const unsigned char*>(in.data()),
                                  static_cast<int>(in.size()));
    out.resize(static_cast<std::size_t>(n));
    return out;
}

void wipe(std::string& s) {
    OPENSSL_cleanse(s.data(), s.size());
    s.clear();
}

} // namespace

Failure from_reply(const smx::smtp::Reply& r) {
    Failure f;
    f.code = static_cast<unsigned>(r.code);
    f.enhanced = r.enhanced;
    for (std::size_t i = 0; i < r.lines.size(); ++i) {
        auto [enh, text] = smx::smtp::split_enhanced(r.lines[i]);
        if (i > 0) f.text += ' ';
        f.text += enh == r.enhanced ? text : r.lines[i];
    }
    if (r.truncated) f.text += " ...";  // the server said more than is kept
    return f;
}

Session::Session(asio::any_io_executor ex, const smx::ClientConfig& cfg,
                 asio::ssl::context* tls, TlsSessions* resume)
    : cfg_(cfg), tls_(tls), resume_(resume), stream_(tcp::socket(ex)), reader_(stream_),
      idle_timer_(ex) {}

void Session::close() {
    open_ = false;
    boost::system::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
}

asio::awaitable<bool> Session::write(std::string_view data, const char* stage) {
    bool ok = co_await smx::smtp::write_all(stream_, data, cfg_.command_timeout);
    if (!ok) fail_ = {451, "4.4.2", "lost connection with " + relay_ + " while " + stage};
    co_return ok;
}

bool Session::has_buffered() {
    return reader_.buffered() > 0 || (stream_.tls() && SSL_pending(stream_.ssl()) > 0);
}

bool Session::has_unread() {
    boost::system::error_code ec;
    const std::size_t pending = stream_.socket().available(ec);
    return has_buffered() || pending > 0 || ec;
}

// Reads the next reply into rep_. false when the connection is gone: EOF,
// error, timeout, 421 (the server is closing the channel), or a reply that
// has no business in its place (a protocol error).
asio::awaitable<bool> Session::read(const char* stage, Expect e) {
    rep_ = co_await smx::smtp::read_reply(reader_, cfg_.command_timeout);
    const bool in_place = e == Expect::data   ? rep_.code == 354 || rep_.code >= 400
                          : e == Expect::auth ? rep_.code == 334 || rep_.code / 100 != 3
                                              : rep_.code / 100 != 3;
    if (rep_.status == ReadStatus::ok && rep_.code != 421 && in_place) {
        replied_ = true;
        co_return true;
    }
    if (rep_.status == ReadStatus::ok && rep_.code != 421) {
        replied_ = true;
        fail_ = {451, "4.5.0", "host " + relay_ + " said: " + rep_.summary() +
                                   " (protocol error in reply to " + stage + ")"};
        spdlog::warn("protocol error: host {} said: {} (in reply to {}); closing", relay_,
                     rep_.summary(), stage);
    } else if (rep_.status == ReadStatus::ok) {
        fail_ = from_reply(rep_);
        fail_.text = "host " + relay_ + " said: " + fail_.text + " (in reply to " + stage + ")";
    } else if (rep_.status == ReadStatus::timeout) {
        fail_ = {451, "4.4.2", "conversation with " + relay_ + " timed out while " + stage};
    } else {
        fail_ = {451, "4.4.2", "lost connection with " + relay_ + " while " + stage};
    }
    co_return false;
}

// A command and its reply.
//
// Note on style in this file: GCC 12 miscompiles `if (co_await f())` with a
// co_return branch (the frame gets corrupted), so every co_await result goes
// into a local first.
asio::awaitable<bool> Session::command(std::string_view data, const char* stage) {
    bool ok = co_await write(data, stage);
    if (ok) {
        ok = co_await read(stage);
    }
    co_return ok;
}

asio::awaitable<std::optional<Failure>> Session::open(const Target& t, smx::ClientTls tls,
                                                      const smx::Credentials* auth) {
    using namespace asio::experimental::awaitable_operators;
    relay_ = t.relay();
    const std::string where = "connect to " + connect_label(t);
    asio::steady_timer timer(stream_.get_executor(), cfg_.connect_timeout);
    auto res = co_await (stream_.socket().async_connect(t.ep, asio::as_tuple(asio::use_awaitable)) ||
                         timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (res.index() == 1) {
        close();
        co_return Failure{451, "4.4.1", where + ": Connection timed out"};
    }
    if (auto [ec] = std::get<0>(res); ec) {
        close();
        co_return Failure{451, "4.4.1", where + ": " + ec.message()};
    }
    open_ = true;
    boost::system::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // commands are whole writes already

    bool ok = co_await read("receiving the initial server greeting");
    if (!ok) {
        close();
        co_return fail_;
    }
    if (rep_.code != 220) {
        Failure f = from_reply(rep_);
        if (f.code < 400) f = {451, "4.4.2", f.text};
        f.text = "host " + relay_ + " refused to talk to me: " + f.text;
        co_await quit();
        co_return f;
    }
    cmd_ = "EHLO " + cfg_.helo_name + "\r\n";
    ok = co_await command(cmd_, "sending EHLO");
    if (!ok) {
        close();
        co_return fail_;
    }
    if (rep_.code / 100 == 2) {
        parse_ehlo();
        auto err = co_await starttls(t, tls);
        if (!err && auth) err = co_await authenticate(*auth);
        co_return err;
    }
    if (tls == smx::ClientTls::encrypt || tls == smx::ClientTls::verify) {
        co_await quit();
        co_return Failure{451, "4.7.4", "TLS is required, but host " + relay_ +
                                            " refused EHLO: " + from_reply(rep_).text};
    }
    cmd_ = "HELO " + cfg_.helo_name + "\r\n";
    ok = co_await command(cmd_, "sending HELO");
    if (!ok) {
        close();
        co_return fail_;
    }
    if (rep_.code / 100 != 2) {
        Failure f = from_reply(rep_);
        f.text = "host " + relay_ + " refused to talk to me: " + f.text;
        co_await quit();
        co_return f;
    }
    co_return std::nullopt;
}

asio::awaitable<std::optional<Failure>> Session::starttls(const Target& t,
                                                          smx::ClientTls level) {
    const bool required = level == smx::ClientTls::encrypt || level == smx::ClientTls::verify;
    if (level == smx::ClientTls::none || !tls_) co_return std::nullopt;
    if (!starttls_offered_) {
        if (!required) co_return std::nullopt;
        co_await quit();
        co_return Failure{451, "4.7.4", "TLS is required, but was not offered by host " + relay_};
    }
    bool ok = co_await command("STARTTLS\r\n", "sending STARTTLS");
    if (!ok) {
        close();
        co_return fail_;
    }
    if (rep_.code != 220) {
        if (!required) co_return std::nullopt;  // on in plaintext, as postfix goes
        co_await quit();
        co_return Failure{451, "4.7.5", "TLS is required, but host " + relay_ +
                                            " refused STARTTLS: " + from_reply(rep_).text};
    }
    // Nothing may be read after 220 but TLS; a server that sent more is out
    // of step (or injecting).
    if (reader_.buffered() > 0) {
        close();
        co_return Failure{451, "4.5.0", "host " + relay_ + " sent data after its 220 to STARTTLS"};
    }
    // A verified session resumes only where verification is asked for
    // again: a resumed handshake skips the certificate check.
    const std::string resume_key =
        relay_ + (level == smx::ClientTls::verify ? " verify " + t.host : " unverified");
    const std::string err = co_await stream_.start_tls(
        *tls_, asio::ssl::stream_base::client, cfg_.command_timeout, t.host,
        level == smx::ClientTls::verify, [&](SSL* ssl) {
            if (resume_) resume_->prepare(ssl, resume_key);
        });
    if (!err.empty()) {
        if (resume_) resume_->forget(resume_key);
        close();
        tls_fallback_ = !required;
        spdlog::info("TLS handshake with {} failed: {}{}", relay_, err,
                     tls_fallback_ ? "; trying again without TLS" : "");
        co_return Failure{451, "4.7.5", "TLS handshake with " + relay_ + " failed: " + err};
    }
    spdlog::info("{} TLS connection established to {}: {}{}",
                 level == smx::ClientTls::verify ? "Verified" : "Untrusted", relay_,
                 smx::tls::describe(stream_.ssl()),
                 SSL_session_reused(stream_.ssl()) ? " (session resumed)" : "");
    // RFC 3207 4.2: forget what the server said before TLS and ask again.
    cmd_ = "EHLO " + cfg_.helo_name + "\r\n";
    ok = co_await command(cmd_, "sending EHLO after STARTTLS");
    if (!ok || rep_.code / 100 != 2) {
        Failure f = ok ? from_reply(rep_) : fail_;
        if (ok) f.text = "host " + relay_ + " refused EHLO after STARTTLS: " + f.text;
        if (ok) co_await quit();
        close();
        co_return f;
    }
    parse_ehlo();
    co_return std::nullopt;
}

asio::awaitable<bool> Session::auth_step(std::string line) {
    bool ok = co_await write(line, "sending AUTH");
    wipe(line);
    if (ok) {
        ok = co_await read("sending AUTH", Expect::auth);
    }
    co_return ok;
}

// AUTH PLAIN (RFC 4616, with the initial response of RFC 4954), or LOGIN
// when the server offers only that. Each step has the reply deadline and
// there are at most three, so the exchange is bounded.
asio::awaitable<std::optional<Failure>> Session::authenticate(const smx::Credentials& c) {
    // Never a secret in plaintext, whatever level the caller asked for.
    if (!stream_.tls()) {
        co_await quit();
        co_return Failure{451, "4.7.4", "TLS is required for AUTH to host " + relay_ +
                                            ", and is not in use"};
    }
    if (!auth_plain_ && !auth_login_) {
        co_await quit();
        co_return Failure{451, "4.7.0", "host " + relay_ +
                                            " offers no AUTH mechanism smx has (PLAIN, LOGIN), "
                                            "and credentials are configured for it"};
    }
    const char* mech = auth_plain_ ? "PLAIN" : "LOGIN";
    bool ok = false;
    if (auth_plain_) {
        std::string id;
        id += '\0';
        id += c.user;
        id += '\0';
        id += c.password;
        ok = co_await auth_step("AUTH PLAIN " + base64(id) + "\r\n");
        wipe(id);
    } else {
        ok = co_await auth_step("AUTH LOGIN\r\n");
        if (ok && rep_.code == 334) {
            ok = co_await auth_step(base64(c.user) + "\r\n");
        }
        if (ok && rep_.code == 334) {
            ok = co_await auth_step(base64(c.password) + "\r\n");
        }
    }
    if (!ok) {
        close();
        co_return fail_;
    }
    if (rep_.code == 235) {
        spdlog::info("SASL authentication to {} succeeded as {} (AUTH {})", relay_, c.user, mech);
        co_return std::nullopt;
    }
    if (rep_.code == 334) {
        // Neither mechanism has a further challenge: out of step.
        close();
        co_return Failure{451, "4.7.0", "host " + relay_ + " sent an unexpected challenge in AUTH " +
                                            mech};
    }
    // A refusal (535 bad credentials, 454 temporary, ...) is this route's
    // problem, not the message's: the recipients wait.
    Failure f{451, rep_.enhanced.empty() ? "4.7.0" : "4" + rep_.enhanced.substr(1),
              "SASL authentication failed; host " + relay_ + " said: " + rep_.summary()};
    co_await quit();
    co_return f;
}

// BODY=8BITMIME goes on to a next hop that offers 8BITMIME. One that does
// not gets the message anyway, unconverted and without BODY=, as postfix
// sends it (smtp_never_send_8bitmime aside, postfix does not downgrade by
// default). The DSN parameters go on only to a next hop that offers DSN.
std::string Session::mail_params(std::string_view received) const {
    std::string out;
    const auto body = smx::dsn::param(received, "BODY");
    if (eightbit_offered_ && body && smx::iequals(*body, "8BITMIME")) out += " BODY=8BITMIME";
    if (dsn_offered_) out += smx::dsn::pass_on_mail(received);
    return out;
}

void Session::parse_ehlo() {
    pipelining_ = size_offered_ = starttls_offered_ = smtputf8_offered_ = false;
    auth_plain_ = auth_login_ = false;
    dsn_offered_ = eightbit_offered_ = false;
    size_limit_ = 0;
    for (std::size_t i = 1; i < rep_.lines.size(); ++i) {
        const std::string kw = smx::upper(rep_.lines[i].substr(0, rep_.lines[i].find(' ')));
        if (kw == "PIPELINING") {
            pipelining_ = true;
        } else if (kw == "STARTTLS") {
            starttls_offered_ = true;
        } else if (kw == "SMTPUTF8") {
            smtputf8_offered_ = true;
        } else if (kw == "AUTH" || kw.starts_with("AUTH=")) {
            // "AUTH PLAIN LOGIN", or the old "AUTH=PLAIN LOGIN" some servers add.
            std::istringstream words(smx::upper(rep_.lines[i].substr(std::min<std::size_t>(5, kw.size()))));
            for (std::string m; words >> m;) {
                auth_plain_ = auth_plain_ || m == "PLAIN";
                auth_login_ = auth_login_ || m == "LOGIN";
            }
        } else if (kw == "DSN") {
            dsn_offered_ = true;
        } else if (kw == "8BITMIME") {
            eightbit_offered_ = true;
        } else if (kw == "SIZE") {
            size_offered_ = true;
            const auto sp = rep_.lines[i].find(' ');
            if (sp != std::string::npos) {
                try {
                    size_limit_ = std::stoull(rep_.lines[i].substr(sp + 1));
                } catch (const std::exception&) {
                    size_limit_ = 0;  // unparsable limit: let the server decide
                }
            }
        }
    }
}

asio::awaitable<void> Session::quit() {
    if (!open_) co_return;
    const auto t = std::min<std::chrono::steady_clock::duration>(cfg_.command_timeout, 5s);
    bool ok = co_await smx::smtp::write_all(stream_, "QUIT\r\n", t);
    if (ok) {
        const auto rep = co_await smx::smtp::read_reply(reader_, t);
        ok = rep.status == ReadStatus::ok;
    }
    if (ok && stream_.tls()) {
        co_await stream_.close_tls(std::min<std::chrono::steady_clock::duration>(t, 2s));
    }
    close();
}

asio::awaitable<Session::Outcome> Session::transaction(const smx::msg::Deliver& d,
                                                       const MessageFile& f, Results& res) {
    const bool reused = transactions_++ > 0;
    replied_ = false;
    bool ok = co_await exchange(d, f, res);
    if (ok) co_return Outcome::done;
    close();
    if (reused && !replied_) co_return Outcome::retry;
    for (auto& r : res)
        if (r.code == 0) set_result(r, fail_);
    co_return Outcome::done;
}

// The SMTP dialogue of one transaction. false: the connection broke (fail_
// says why); recipients still at code 0 then get fail_.
asio::awaitable<bool> Session::exchange(const smx::msg::Deliver& d, const MessageFile& f,
                                        Results& res) {
    const std::size_t n = d.rcpts.size();
    if (!clean_address(d.sender)) {
        for (auto& r : res) set_result(r, {501, "5.1.7", "bad sender address in queue file"});
        co_return true;
    }
    std::size_t to_send = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (clean_address(d.rcpts[i].addr)) {
            ++to_send;
        } else {
            set_result(res[i], {501, "5.1.3", "bad recipient address in queue file"});
        }
    }
    if (to_send == 0) co_return true;
    if (size_limit_ && f.size() > size_limit_) {
        const Failure big{552, "5.3.4",
                          "message size " + std::to_string(f.size()) + " exceeds size limit " +
                              std::to_string(size_limit_) + " of server " + relay_};
        for (auto& r : res)
            if (r.code == 0) set_result(r, big);
        co_return true;
    }
    // UTF-8 in the envelope needs SMTPUTF8 (RFC 6531); a next hop without it
    // gets no such message: a bounce, as postfix does.
    bool utf8 = smx::smtp::has_8bit(d.sender);
    for (std::size_t i = 0; i < n; ++i)
        if (res[i].code == 0 && smx::smtp::has_8bit(d.rcpts[i].addr)) utf8 = true;
    if (utf8 && !smtputf8_offered_) {
        const Failure no{550, "5.6.7",
                         "SMTPUTF8 is required, but was not offered by host " + relay_};
        for (auto& r : res)
            if (r.code == 0) set_result(r, no);
        co_return true;
    }
    if (needs_rset_) {
        bool ok = co_await command("RSET\r\n", "sending RSET");
        if (!ok) co_return false;
        if (rep_.code != 250) {
            fail_ = from_reply(rep_);
            fail_.code = 451;  // a server that cannot reset is unusable, not a verdict
            co_return false;
        }
        needs_rset_ = false;
    }

    cmd_.clear();
    cmd_ += "MAIL FROM:<";
    cmd_ += d.sender;
    cmd_ += '>';
    if (size_offered_) {
        cmd_ += " SIZE=";
        cmd_ += std::to_string(f.size());
    }
    if (utf8) cmd_ += " SMTPUTF8";
    cmd_ += mail_params(d.params);
    cmd_ += "\r\n";
    // From here on the server holds transaction state until end of data.
    needs_rset_ = true;
    if (pipelining_) {
        // RFC 2920: MAIL, every RCPT and DATA in one write, replies in order.
        for (std::size_t i = 0; i < n; ++i) {
            if (res[i].code != 0) continue;
            cmd_ += "RCPT TO:<";
            cmd_ += d.rcpts[i].addr;
            cmd_ += '>';
            if (dsn_offered_) cmd_ += smx::dsn::pass_on_rcpt(d.rcpts[i].params);
            cmd_ += "\r\n";
        }
        cmd_ += "DATA\r\n";
    }
    bool ok = co_await command(cmd_, "sending MAIL FROM");
    if (!ok) co_return false;
    std::optional<Failure> mail_err;
    if (rep_.code / 100 != 2) mail_err = from_reply(rep_);

    accepted_.assign(n, 0);
    std::size_t accepted = 0;
    for (std::size_t i = 0; i < n; ++i) {
        if (res[i].code != 0) continue;
        if (!pipelining_) {
            if (mail_err) break;
            cmd_ = "RCPT TO:<" + d.rcpts[i].addr + '>' +
                   (dsn_offered_ ? smx::dsn::pass_on_rcpt(d.rcpts[i].params) : std::string()) + "\r\n";
            ok = co_await write(cmd_, "sending RCPT TO");
            if (!ok) co_return false;
        }
        ok = co_await read("sending RCPT TO");
        if (!ok) co_return false;
        if (rep_.code / 100 == 2) {
            accepted_[i] = 1;
            ++accepted;
        } else if (!mail_err) {
            set_result(res[i], from_reply(rep_));
        }
    }
    if (mail_err) {
        for (std::size_t i = 0; i < n; ++i)
            if (res[i].code == 0 || accepted_[i]) set_result(res[i], *mail_err);
        accepted_.assign(n, 0);
        accepted = 0;
    }
    if (!pipelining_) {
        if (accepted == 0) co_return true;
        ok = co_await write("DATA\r\n", "sending DATA");
        if (!ok) co_return false;
    }
    ok = co_await read("sending DATA", Expect::data);
    if (!ok) co_return false;
    if (rep_.code != 354) {
        for (std::size_t i = 0; i < n; ++i)
            if (accepted_[i]) set_result(res[i], from_reply(rep_));
        co_return true;
    }
    if (accepted == 0) {
        // RFC 2920 3.1: DATA was accepted although no recipient was; end
        // it with an empty message.
        ok = co_await command(".\r\n", "sending end of data");
        co_return ok;
    }
    ok = co_await send_body(f);
    if (ok) {
        ok = co_await read("sending end of data");
    }
    if (!ok) co_return false;
    const Failure final_reply = from_reply(rep_);
    for (std::size_t i = 0; i < n; ++i)
        if (accepted_[i]) set_result(res[i], final_reply);
    needs_rset_ = false;
    co_return true;
}

// Streams the content file in large blocks, dot-stuffed and with long lines
// broken (encode_body), and ends with CRLF.CRLF
// in the same write as the last block.
asio::awaitable<bool> Session::send_body(const MessageFile& f) {
    BodyState st;
    std::uint64_t off = 0;
    for (;;) {
        out_.clear();
        bool last = off >= f.size();
        if (!last) {
            // A file that ends early (its writer's account cut it after it
            // was checked) is an error too: the size is the envelope's.
            if (!f.read_at(off, static_cast<std::size_t>(std::min<std::uint64_t>(
                                    body_block, f.size() - off)),
                           in_) ||
                in_.empty()) {
                // Never end the data now: the server must drop the partial
                // message with the connection.
                fail_ = {451, "4.3.0", "error reading queue file"};
                co_return false;
            }
            off += in_.size();
            last = off >= f.size();
            encode_body(in_, st, out_);
        }
        if (last) out_ += st.cr ? "\n.\r\n" : st.col == 0 ? ".\r\n" : "\r\n.\r\n";
        bool ok = co_await write(out_, "sending message body");
        if (!ok) co_return false;
        if (last) co_return true;
    }
}

} // namespace smx::smtpc
