// smx-source: SMTP load generator. Many concurrent sessions on one
// io_context, N messages of a size (or size mix), R recipients each, M
// messages per connection, optional PIPELINING. Measures the end-of-DATA to
// 250 latency of every message and prints one JSON line at the end.
#include "perf/common.hpp"
#include "perf/message.hpp"
#include "perf/source_run.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/smtp_stream.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <iostream>
#include <memory>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace smx::perf;
using Reader = smx::smtp::LineReader<smx::smtp::Stream>;
using Stream = smx::smtp::Stream;
using smx::smtp::Reply;

const char* usage =
    "usage: smx-source [--host H] --port P [-s sessions] [-n messages] [-S size|MIN:MAX|A,B]\n"
    "                  [-r recipients] [-m msgs-per-connection (0 = unlimited)] [-P]\n"
    "                  [--from-domain D] [--rcpt-domain D] [--helo NAME]\n"
    "                  [--timeout SEC] [--deadline SEC] [--max-connect-failures N]\n"
    "                  [--starttls]\n"
    "--starttls: STARTTLS after EHLO on every connection (any certificate), EHLO again.\n";

// Connects with a deadline. The timer's handler cancels the socket the
// session is connecting now, through `Connecting`, which outlives every
// socket of the session: a handler that was already queued when the
// connect completed finds null there and does nothing. (An
// `async_connect || timer` group costs co_spawn frames and several heap
// blocks per connection: 10 us of user time per message at 1000 sessions.)
struct Connecting {
    tcp::socket* socket = nullptr;
};

asio::awaitable<bool> connect(tcp::socket& s, const tcp::endpoint& ep, asio::steady_timer& timer,
                              const std::shared_ptr<Connecting>& now,
                              std::chrono::steady_clock::duration timeout) {
    now->socket = &s;
    timer.expires_after(timeout);
    timer.async_wait([now](boost::system::error_code ec) {
        boost::system::error_code ignored;
        if (!ec && now->socket) now->socket->cancel(ignored);
    });
    auto [ec] = co_await s.async_connect(ep, smx::await_tuple);
    now->socket = nullptr;
    timer.cancel();
    co_return !ec;
}

asio::awaitable<void> pause(std::chrono::milliseconds d) {
    asio::steady_timer t(co_await asio::this_coro::executor, d);
    co_await t.async_wait(smx::await_tuple);
}

bool offers(const Reply& ehlo, std::string_view ext) {
    for (const auto& l : ehlo.lines) {
        if (l.size() < ext.size()) continue;
        if (std::equal(ext.begin(), ext.end(), l.begin(), [](char a, char b) {
                return a == std::toupper(static_cast<unsigned char>(b));
            }) && (l.size() == ext.size() || l[ext.size()] == ' '))
            return true;
    }
    return false;
}

// One mail transaction; false when the connection is no longer usable.
// `msg`: the session's message buffer.
asio::awaitable<bool> transaction(Run& run, Stream& s, Reader& rd, std::size_t idx,
                                  bool pipelining, std::string& msg) {
    const auto t = run.opt.timeout;
    const Envelope env = run.envelope(idx);
    std::string mail = "MAIL FROM:<" + env.sender + ">\r\n";
    std::vector<std::string> rcpts;
    for (const auto& r : env.recipients) rcpts.push_back("RCPT TO:<" + r + ">\r\n");

    Reply mail_r, data_r;
    std::vector<Reply> rcpt_r;
    if (pipelining) {
        std::string batch = mail;
        for (const auto& r : rcpts) batch += r;
        batch += "DATA\r\n";
        const auto wrote = co_await smx::smtp::write_all(s, batch, t);
        if (!wrote) co_return run.broken(Reply{});
        mail_r = co_await smx::smtp::read_reply(rd, t);
        for (std::size_t i = 0; i < rcpts.size() && mail_r.code; ++i)
            rcpt_r.push_back(co_await smx::smtp::read_reply(rd, t));
        if (mail_r.code) data_r = co_await smx::smtp::read_reply(rd, t);
    } else {
        const auto wrote = co_await smx::smtp::write_all(s, mail, t);
        if (!wrote) co_return run.broken(Reply{});
        mail_r = co_await smx::smtp::read_reply(rd, t);
        for (std::size_t i = 0; i < rcpts.size() && mail_r.code / 100 == 2; ++i) {
            const auto wrote = co_await smx::smtp::write_all(s, rcpts[i], t);
            if (!wrote) co_return run.broken(Reply{});
            rcpt_r.push_back(co_await smx::smtp::read_reply(rd, t));
            if (!rcpt_r.back().code) break;
        }
        const bool any = std::any_of(rcpt_r.begin(), rcpt_r.end(),
                                     [](const Reply& r) { return r.code / 100 == 2; });
        if (any) {
            const auto wrote = co_await smx::smtp::write_all(s, "DATA\r\n", t);
            if (!wrote) co_return run.broken(Reply{});
            data_r = co_await smx::smtp::read_reply(rd, t);
        }
    }
    if (!mail_r.code) co_return run.broken(mail_r);
    for (const auto& r : rcpt_r)
        if (!r.code) co_return run.broken(r);
    if (pipelining && !data_r.code) co_return run.broken(data_r);

    const std::size_t accepted = run.count_rcpts(rcpt_r);
    if (data_r.code != 354) {
        // MAIL refused, every recipient refused, or DATA refused.
        if (mail_r.code / 100 != 2) run.fail("mail", mail_r.code);
        else if (accepted == 0) run.fail("no_valid_rcpt", 0);
        else run.fail("data", data_r.code);
        const auto wrote = co_await smx::smtp::write_all(s, "RSET\r\n", t);
        if (!wrote) co_return run.broken(Reply{});
        const Reply rset = co_await smx::smtp::read_reply(rd, t);
        co_return rset.code / 100 == 2;
    }
    wire_message(idx, run.sizes.size_for(idx), env, msg);
    const auto wrote_msg = co_await smx::smtp::write_all(s, msg, t);
    if (!wrote_msg) co_return run.broken(Reply{});
    const auto sent = std::chrono::steady_clock::now();
    const Reply dot = co_await smx::smtp::read_reply(rd, t);
    if (!dot.code) co_return run.broken(dot);
    run.finished(dot.code, std::chrono::steady_clock::now() - sent, msg.size());
    co_return true;
}

// EHLO; with --starttls then STARTTLS and EHLO again over TLS. The EHLO
// reply that counts, or an empty reply with `failed` set to what went wrong.
asio::awaitable<Reply> hello(Run& run, Stream& s, Reader& rd, asio::ssl::context* tls,
                             std::string& failed) {
    const auto t = run.opt.timeout;
    Reply ehlo;
    const auto ehlo_sent = co_await smx::smtp::write_all(s, "EHLO " + run.opt.helo + "\r\n", t);
    if (ehlo_sent) ehlo = co_await smx::smtp::read_reply(rd, t);
    if (ehlo.code != 250 || !tls) {
        if (ehlo.code != 250) failed = "ehlo";
        co_return ehlo;
    }
    failed = "starttls";
    if (!offers(ehlo, "STARTTLS")) co_return Reply{};
    const auto asked = co_await smx::smtp::write_all(s, "STARTTLS\r\n", t);
    if (!asked) co_return Reply{};
    const Reply ready = co_await smx::smtp::read_reply(rd, t);
    if (ready.code != 220 || rd.buffered()) co_return Reply{};
    const std::string err = co_await s.start_tls(*tls, asio::ssl::stream_base::client, t);
    if (!err.empty()) co_return Reply{};
    failed = "ehlo";
    ehlo = Reply{};
    const auto again = co_await smx::smtp::write_all(s, "EHLO " + run.opt.helo + "\r\n", t);
    if (again) ehlo = co_await smx::smtp::read_reply(rd, t);
    if (ehlo.code == 250) failed.clear();
    co_return ehlo;
}

asio::awaitable<void> session(Run& run, tcp::endpoint ep, asio::ssl::context* tls) {
    const auto ex = co_await asio::this_coro::executor;
    const auto t = run.opt.timeout;
    int backoff = 0;
    // A message is claimed before connecting, so that no connection is
    // opened that then has nothing to send (a peer would count a session
    // that ends before MAIL); a failed connect retries with the same message.
    std::size_t idx = 0;
    bool have = run.take(idx);
    std::string msg;
    asio::steady_timer connect_timer(ex);
    const auto connecting = std::make_shared<Connecting>();
    while (have && run.running()) {
        if (backoff) co_await pause(std::min(50 * backoff, 1000) * std::chrono::milliseconds(1));
        Stream s{tcp::socket(ex)};
        const auto connected = co_await connect(s.socket(), ep, connect_timer, connecting, t);
        if (!connected) {
            ++backoff;
            run.connect_failed("connect");
            continue;
        }
        boost::system::error_code ignored;
        s.socket().set_option(tcp::no_delay(true), ignored);  // a reset peer shows up at the first read
        Reader rd(s);
        const Reply greet = co_await smx::smtp::read_reply(rd, t);
        if (greet.code != 220) {
            ++backoff;
            run.connect_failed(greet.code ? "greeting_" + std::to_string(greet.code / 100) + "xx"
                                          : "greeting_io");
            continue;
        }
        std::string failed;
        const Reply ehlo = co_await hello(run, s, rd, tls, failed);
        if (!failed.empty()) {
            ++backoff;
            run.connect_failed(failed);
            continue;
        }
        backoff = 0;
        run.connected();
        const bool pipelining = run.opt.pipelining && offers(ehlo, "PIPELINING");
        bool alive = true;
        const long limit = run.opt.per_connection;  // 0: no limit
        for (long sent = 0; alive && have && (limit == 0 || sent < limit); ++sent) {
            alive = co_await transaction(run, s, rd, idx, pipelining, msg);
            have = run.take(idx);
        }
        // The 221 is not worth a long wait: the messages are done.
        const std::chrono::steady_clock::duration quit_wait = std::min<std::chrono::steady_clock::duration>(t, std::chrono::seconds(5));
        if (alive) {
            const bool quit_sent = co_await smx::smtp::write_all(s, "QUIT\r\n", t);
            if (quit_sent) co_await smx::smtp::read_reply(rd, quit_wait);
        }
        s.socket().close(ignored);
    }
    run.session_done();
}

Options parse(int argc, char** argv) {
    Options o;
    Args a(argc, argv);
    while (a.next()) {
        const std::string& k = a.opt();
        if (k == "--host") o.host = a.value();
        else if (k == "--port" || k == "-p") o.port = static_cast<unsigned short>(a.number(1, 65535));
        else if (k == "-s") o.sessions = a.number(1, 100000);
        else if (k == "-n") o.messages = static_cast<std::size_t>(a.number(1, 100000000));
        else if (k == "-S") o.size_spec = a.value();
        else if (k == "-r") o.recipients = a.number(1, 1000);
        else if (k == "-m") o.per_connection = a.number(0, 100000000);
        else if (k == "-P" || k == "--pipelining") o.pipelining = true;
        else if (k == "--from-domain") o.from_domain = a.value();
        else if (k == "--rcpt-domain") o.rcpt_domain = a.value();
        else if (k == "--helo") o.helo = a.value();
        else if (k == "--timeout") o.timeout = std::chrono::milliseconds(static_cast<long>(a.real(0.001, 86400) * 1000));
        else if (k == "--deadline") o.deadline = std::chrono::milliseconds(static_cast<long>(a.real(0.001, 864000) * 1000));
        else if (k == "--starttls") o.starttls = true;
        else if (k == "--max-connect-failures") o.max_connect_failures = static_cast<std::uint64_t>(a.number(0, 1000000000));
        else throw std::invalid_argument("unknown option " + k);
    }
    if (o.port == 0) throw std::invalid_argument("--port is required");
    return o;
}

} // namespace

int main(int argc, char** argv) {
    Options opt;
    try {
        opt = parse(argc, argv);
        SizeSpec check(opt.size_spec);
    } catch (const std::exception& e) {
        std::cerr << "smx-source: " << e.what() << "\n" << usage;
        return 2;
    }
    raise_fd_limit();
    asio::io_context ctx(1);
    tcp::endpoint ep;
    try {
        tcp::resolver res(ctx);
        ep = *res.resolve(opt.host, std::to_string(opt.port)).begin();
    } catch (const std::exception& e) {
        std::cerr << "smx-source: " << opt.host << ": " << e.what() << "\n";
        return 2;
    }
    // A benchmark client: any certificate will do, the cost is the handshake
    // and the encryption. TLS 1.2 at least, as smx and postfix require.
    std::unique_ptr<asio::ssl::context> tls;
    if (opt.starttls) {
        tls = std::make_unique<asio::ssl::context>(asio::ssl::context::tls_client);
        SSL_CTX_set_min_proto_version(tls->native_handle(), TLS1_2_VERSION);
        tls->set_verify_mode(asio::ssl::verify_none);
    }
    Run run(opt, ctx);
    for (long i = 0; i < opt.sessions; ++i)
        asio::co_spawn(ctx, session(run, ep, tls.get()), smx::crash_on_exception("smx-source session"));
    smx::run_or_panic(ctx, "smx-source");
    std::cout << run.report() << std::endl;
    return run.all_delivered() ? 0 : 1;
}
