#include "libsm/milter_conn.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>

#include <sys/socket.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <tuple>

namespace smx::milter {

namespace {

using clock = std::chrono::steady_clock;
using error_code = boost::system::error_code;

// What the milter answers nothing to waits in out_ for the next packet it
// answers, unless it reaches this size (a body with SMFIP_NR_BODY).
constexpr std::size_t hold_at = 65536;
// What one read asks for, unless the rest of a longer packet whose header is
// in (a body replacement comes in packets of up to 64 KiB).
constexpr std::size_t read_room = 4096;

std::string text_of(const error_code& ec) {
    if (ec == asio::error::eof) return "lost connection";
    return ec.message();
}

// "client_addr" for "{client_addr}".
std::string_view bare(std::string_view n) {
    if (n.size() > 2 && n.front() == '{' && n.back() == '}') return n.substr(1, n.size() - 2);
    return n;
}

} // namespace

const std::vector<std::string>& default_macros(Stage s) {
    static const std::array<std::vector<std::string>, stage_count> lists = {{
        // connect
        {"j", "{daemon_name}", "{daemon_addr}", "v", "_", "{client_addr}", "{client_port}",
         "{client_name}", "{client_ptr}", "{client_connections}", "{if_addr}", "{if_name}"},
        // helo
        {"{tls_version}", "{cipher}", "{cipher_bits}", "{cert_subject}", "{cert_issuer}"},
        // mail
        {"i", "{auth_type}", "{auth_authen}", "{auth_author}", "{mail_addr}", "{mail_host}",
         "{mail_mailer}"},
        // rcpt
        {"i", "{rcpt_addr}", "{rcpt_host}", "{rcpt_mailer}"},
        // data
        {"i"},
        // end of message
        {"i"},
        // end of headers
        {},
    }};
    return lists[static_cast<std::size_t>(s)];
}

// The connection's deadline, shared with the watchdog, which may wake after
// the Conn is gone.
struct Conn::Watch {
    explicit Watch(asio::any_io_executor ex) : timer(std::move(ex)) {}
    asio::steady_timer timer;
    asio::generic::stream_protocol::socket* sock = nullptr;  // null: the Conn is gone
    clock::time_point deadline{};                     // of the wait in progress
    clock::time_point armed = clock::time_point::max();  // what the timer is set to
    bool waiting = false;  // a read, write or connect is in progress
    bool fired = false;    // the deadline passed: the socket's operation was cancelled
};

// Asio's echo_server_with_deadline pattern: it sleeps until the deadline
// and cancels the socket's operation if the deadline has passed; a deadline
// set later than the timer needs nothing, an earlier one wakes it
// (begin_wait). So a busy connection costs one timer operation per command
// timeout, not one per read; an idle one sleeps until a wait begins.
asio::awaitable<void> Conn::watchdog(std::shared_ptr<Watch> w) {
    while (w->sock) {
        if (w->waiting && clock::now() >= w->deadline) {
            w->fired = true;
            w->waiting = false;
            error_code ignored;
            w->sock->cancel(ignored);
        }
        w->armed = w->waiting ? w->deadline : clock::time_point::max();
        w->timer.expires_at(w->armed);
        co_await w->timer.async_wait(smx::await_tuple);
    }
}

void Conn::begin_wait(clock::duration timeout) {
    Watch& w = *watch_;
    w.deadline = clock::now() + timeout;
    w.waiting = true;
    w.fired = false;
    if (w.deadline < w.armed) w.timer.cancel();
}

error_code Conn::end_wait(error_code ec) {
    watch_->waiting = false;
    return watch_->fired && ec ? asio::error::timed_out : ec;
}

Result Conn::dead() {
    Result r;
    r.status = Result::dead;
    return r;
}

Conn::Conn(asio::any_io_executor ex, ConnSettings s)
    : s_(std::move(s)), sock_(ex), watch_(std::make_shared<Watch>(ex)) {
    watch_->sock = &sock_;
}

Conn::~Conn() {
    watch_->sock = nullptr;
    watch_->timer.cancel();
}

Result Conn::fail(std::string what) {
    error_code ignored;
    sock_.close(ignored);
    open_ = false;
    Result r;
    r.status = Result::error;
    r.what = std::move(what);
    return r;
}

// GCC 12 warns falsely that these coroutines' frames are freed with a
// mismatched operator delete (GCC PR 109224, fixed in GCC 13; as
// pickup/local_milters.cpp); Boost.Asio allocates and frees the frames itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
asio::awaitable<Result> Conn::open() {
    asio::co_spawn(sock_.get_executor(), watchdog(watch_), smx::crash_on_exception("milter deadline"));
    const auto deadline = clock::now() + s_.connect_timeout;
    std::vector<asio::generic::stream_protocol::endpoint> eps;
    if (s_.where.is_unix) {
        eps.emplace_back(asio::local::stream_protocol::endpoint(s_.where.path));
    } else {
        error_code ec;
        const auto a = asio::ip::make_address(s_.where.host, ec);
        if (!ec) {
            eps.emplace_back(asio::ip::tcp::endpoint(a, s_.where.port));
        } else {
            // A name: the resolver runs it on asio's own thread, so this
            // session waits, not the loop.
            using namespace asio::experimental::awaitable_operators;
            asio::ip::tcp::resolver res(co_await asio::this_coro::executor);
            asio::steady_timer timer(co_await asio::this_coro::executor, s_.connect_timeout);
            auto r = co_await (res.async_resolve(s_.where.host, std::to_string(s_.where.port),
                                                 asio::as_tuple(asio::use_awaitable)) ||
                               timer.async_wait(asio::as_tuple(asio::use_awaitable)));
            if (r.index() == 1) co_return fail("connect: resolving " + s_.where.host + ": " +
                                               text_of(asio::error::timed_out));
            auto [rec, results] = std::get<0>(std::move(r));
            if (rec) co_return fail("connect: resolving " + s_.where.host + ": " + rec.message());
            for (const auto& e : results) eps.emplace_back(e.endpoint());
        }
    }
    error_code ec = asio::error::host_not_found;
    for (const auto& ep : eps) {
        if (clock::now() >= deadline) {
            ec = asio::error::timed_out;
            break;
        }
        error_code ignored;
        sock_.close(ignored);
        begin_wait(deadline - clock::now());
        std::tie(ec) = co_await sock_.async_connect(ep, smx::await_tuple);
        ec = end_wait(ec);
        if (!ec) break;
    }
    if (ec) co_return fail("connect: " + text_of(ec));
    open_ = true;

    // Every step of the version, except seeing rejected recipients (SMTPS
    // does not send them).
    const std::uint32_t steps =
        (s_.version >= 6 ? step::v6 : s_.version >= 4 ? step::v4 : s_.version == 3 ? step::v3
                                                                                     : step::v2) &
        ~step::rcpt_rej;
    out_.clear();
    co_return co_await event(
        Cmd::optneg, std::nullopt, MacroLookup{},
        [this, steps](std::string& out) { put_optneg(out, s_.version, action::all, steps); },
        s_.command_timeout);
}

std::string Conn::write_now() {
    // MSG_DONTWAIT: asio's own write_some would wait in poll(2) unless the
    // socket were set non-blocking, an ioctl(2) per connection.
    const auto sent = ::send(sock_.native_handle(), out_.data(), out_.size(),
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return {};
        return text_of(error_code(errno, asio::error::get_system_category()));
    }
    out_.erase(0, static_cast<std::size_t>(sent));
    return {};
}

asio::awaitable<std::string> Conn::write_rest(clock::duration timeout) {
    begin_wait(timeout);
    auto [ec, n] = co_await asio::async_write(sock_, asio::buffer(out_), smx::await_tuple);
    ec = end_wait(ec);
    out_.clear();
    co_return ec ? text_of(ec) : std::string();
}

Frame Conn::frame() const {
    std::array<unsigned char, 4> header{};
    std::memcpy(header.data(), rbuf_.data(), 4);
    return read_frame(header, s_.max_packet);
}

bool Conn::take_packet(char& code, std::string& err) {
    if (rbuf_.size() < 4) return false;
    const auto f = frame();
    if (!f.error.empty()) {
        err = f.error;
        return true;
    }
    if (rbuf_.size() - 4 < f.length) return false;
    code = rbuf_[4];
    in_.assign(rbuf_, 5, f.length - 1);
    rbuf_.erase(0, 4 + f.length);
    return true;
}

std::size_t Conn::want() const {
    if (rbuf_.size() < 4) return read_room;
    return std::max(read_room, 4 + frame().length - rbuf_.size());
}

void Conn::put_stage_macros(Cmd c, Stage stage, const MacroLookup& m) {
    const auto& chosen = neg_.macros[static_cast<std::size_t>(stage)];
    const auto& names = chosen ? *chosen : default_macros(stage);
    if (names.empty()) return;
    const auto at = begin_macros(out_, c);
    for (const auto& n : names)
        if (auto v = m(bare(n))) put_macro(out_, n, *v);
    end_macros(out_, at);
}

bool Conn::edit_allowed(Act a) const {
    std::uint32_t need = 0;
    switch (a) {
    case Act::addheader: need = action::add_headers; break;
    case Act::insheader:
    case Act::chgheader: need = action::change_headers; break;
    case Act::replbody: need = action::change_body; break;
    case Act::addrcpt: need = action::add_rcpt; break;
    case Act::addrcpt_par: need = action::add_rcpt_args; break;
    case Act::delrcpt: need = action::delete_rcpt; break;
    case Act::chgfrom: need = action::change_from; break;
    case Act::quarantine: need = action::quarantine; break;
    default: return false;
    }
    // INSHEADER is allowed with either header flag, as libmilter does.
    if (a == Act::insheader) need |= action::add_headers;
    return (neg_.actions & need) != 0;
}

template <class Put>
asio::awaitable<Result> Conn::event(Cmd c, std::optional<Stage> stage, const MacroLookup& m,
                                    Put put, clock::duration timeout, std::size_t max_body) {
    if (!open_) co_return dead();
    if (!neg_.wants(c)) co_return Result{};
    if (stage) put_stage_macros(c, *stage, m);
    put(out_);
    if (neg_.no_reply(c) && out_.size() < hold_at) co_return Result{};
    auto err = write_now();
    if (err.empty() && !out_.empty()) err = co_await write_rest(timeout);
    if (!err.empty()) co_return fail("error writing " + std::string(name(c)) + ": " + err);
    if (neg_.no_reply(c)) co_return Result{};
    Result res;
    std::size_t body_size = 0;
    std::optional<std::size_t> body_at;  // the REPLBODY edit later chunks join
    for (;;) {
        // Replies are read as they come, straight into rbuf_, several
        // packets at a time (the edits of an end of message and its final
        // reply come together), each within one deadline. The wait is
        // awaited here, not in a coroutine of its own: no frame to allocate
        // per reply. No read is tried before it: asio's reactor tries one.
        char code = 0;
        if (!take_packet(code, err)) {
            error_code ec;
            begin_wait(timeout);
            while (!ec && !take_packet(code, err)) {
                const std::size_t had = rbuf_.size(), room = want();
                rbuf_.resize(had + room);
                std::size_t n = 0;
                std::tie(ec, n) = co_await sock_.async_read_some(
                    asio::buffer(rbuf_.data() + had, room), smx::await_tuple);
                rbuf_.resize(had + n);
            }
            if ((ec = end_wait(ec)))
                err = "can't read " + std::string(name(c)) + " reply packet " +
                      (rbuf_.size() < 4 ? "header: " : "data: ") + text_of(ec);
        }
        if (!err.empty()) co_return fail(err);
        if (c == Cmd::optneg) {
            if (code != static_cast<char>(Cmd::optneg))
                co_return fail("unexpected reply " + name(code) + " in initial handshake");
            if (err = decode_optneg(in_, s_.version, action::all, neg_); !err.empty())
                co_return fail(err);
            co_return Result{};
        }
        Reply r;
        if (auto err = decode_reply(code, in_, r); !err.empty())
            co_return fail(err + " after " + std::string(name(c)));
        if (r.act == Act::progress) continue;
        if (is_final(r.act)) {
            if (r.act == Act::skip) {
                if (c == Cmd::body) skip_body_ = true;
                r.act = Act::cont;
            } else if (r.act == Act::conn_fail || r.act == Act::shutdown) {
                // The milter gives up on this connection: a temporary
                // failure, and nothing more is sent to it.
                r.act = Act::tempfail;
                (void)fail("");
            }
            res.reply = std::move(r);
            co_return res;
        }
        if (c != Cmd::eob)
            co_return fail("unexpected " + name(code) + " after " + std::string(name(c)));
        if (!edit_allowed(r.act))
            co_return fail(name(code) + " was not negotiated (actions " +
                           std::to_string(neg_.actions) + ")");
        if (r.act == Act::replbody) {
            body_size += r.text.size();
            if (body_size > max_body)
                co_return fail("body replacement larger than " + std::to_string(max_body) +
                               " octets");
            if (body_at) {
                res.edits[*body_at].text += r.text;
                continue;
            }
            body_at = res.edits.size();
        }
        res.edits.push_back(std::move(r));
    }
}
#pragma GCC diagnostic pop

// The calls below return event's coroutine, not one of their own: the
// captures are the caller's arguments, alive while it awaits the call.

asio::awaitable<Result> Conn::connect(const MacroLookup& m, std::string_view host, Family family,
                                      std::uint16_t port, std::string_view addr) {
    return event(Cmd::connect, Stage::connect, m,
                 [=](std::string& out) { put_connect(out, host, family, port, addr); },
                 s_.command_timeout);
}

asio::awaitable<Result> Conn::helo(const MacroLookup& m, std::string_view helo_name) {
    return event(Cmd::helo, Stage::helo, m, [=](std::string& out) { put_helo(out, helo_name); },
                 s_.command_timeout);
}

asio::awaitable<Result> Conn::mail(const MacroLookup& m, const std::vector<std::string>& args) {
    return event(Cmd::mail, Stage::mail, m, [&args](std::string& out) { put_mail(out, args); },
                 s_.command_timeout);
}

asio::awaitable<Result> Conn::rcpt(const MacroLookup& m, const std::vector<std::string>& args) {
    return event(Cmd::rcpt, Stage::rcpt, m, [&args](std::string& out) { put_rcpt(out, args); },
                 s_.command_timeout);
}

asio::awaitable<Result> Conn::data(const MacroLookup& m) {
    return event(Cmd::data, Stage::data, m, [](std::string& out) { put_bare(out, Cmd::data); },
                 s_.command_timeout);
}

asio::awaitable<Result> Conn::header(const MacroLookup& m, std::string_view field,
                                     std::string_view value) {
    // Sendmail's form: one leading space eaten (unless asked for), lines of
    // a folded field joined by LF (put_header), no line end at the end.
    if ((neg_.steps & step::header_leadspace) == 0 && value.starts_with(' '))
        value.remove_prefix(1);
    if (value.ends_with("\r\n")) value.remove_suffix(2);
    return event(Cmd::header, Stage::eoh, m,
                 [=](std::string& out) { put_header(out, field, value); }, s_.content_timeout);
}

asio::awaitable<Result> Conn::eoh(const MacroLookup& m) {
    return event(Cmd::eoh, Stage::eoh, m, [](std::string& out) { put_bare(out, Cmd::eoh); },
                 s_.content_timeout);
}

asio::awaitable<Result> Conn::body(const MacroLookup& m, std::string_view bytes) {
    while (!bytes.empty() && !skip_body_) {
        const auto chunk = bytes.substr(0, std::min(bytes.size(), chunk_size));
        bytes.remove_prefix(chunk.size());
        auto r = co_await event(Cmd::body, Stage::eom, m,
                                [=](std::string& out) { put_body(out, chunk); },
                                s_.content_timeout);
        if (r.status != Result::ok || r.reply.act != Act::cont) co_return r;
    }
    co_return Result{};
}

asio::awaitable<Result> Conn::eom(const MacroLookup& m, std::size_t max_body) {
    skip_body_ = false;
    return event(Cmd::eob, Stage::eom, m, [](std::string& out) { put_bare(out, Cmd::eob); },
                 s_.content_timeout, max_body);
}

asio::awaitable<Result> Conn::unknown(const MacroLookup& m, std::string_view line) {
    return event(Cmd::unknown, std::nullopt, m,
                 [=](std::string& out) { put_unknown(out, line); }, s_.command_timeout);
}

asio::awaitable<Result> Conn::abort() {
    skip_body_ = false;
    if (!open_) co_return dead();
    put_bare(out_, Cmd::abort);
    auto err = write_now();
    if (err.empty() && !out_.empty()) err = co_await write_rest(s_.command_timeout);
    if (!err.empty()) co_return fail("error writing SMFIC_ABORT: " + err);
    co_return Result{};
}

asio::awaitable<Result> Conn::quit() {
    if (!open_) co_return dead();
    put_bare(out_, Cmd::quit);
    auto err = write_now();
    if (err.empty() && !out_.empty()) err = co_await write_rest(s_.command_timeout);
    Result r = fail(err.empty() ? "" : "error writing SMFIC_QUIT: " + err);
    if (err.empty()) r.status = Result::ok;
    co_return r;
}

} // namespace smx::milter
