// Template definitions for smtp_io.hpp; included from there only.
#pragma once

#include "libsm/await.hpp"

#include <boost/asio/experimental/awaitable_operators.hpp>
#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>
#include <type_traits>

namespace smx::smtp {

template <class Stream>
void LineReader<Stream>::Watch::arm(const std::shared_ptr<Watch>& w) {
    w->waiting = true;
    const auto gen = ++w->gen;
    w->timer.expires_at(w->deadline);
    w->timer.async_wait([w, gen](const boost::system::error_code&) {
        if (gen != w->gen || w->stopped) return;  // re-armed or reader gone
        w->waiting = false;
        if (!w->reading) return;  // idle: the next read arms it again
        if (std::chrono::steady_clock::now() >= w->deadline) {
            w->fired = true;
            boost::system::error_code ec;
            w->stream->lowest_layer().cancel(ec);
            return;
        }
        arm(w);  // the deadline moved on since this wait began
    });
}

template <class Stream>
LineReader<Stream>::LineReader(Stream& s, std::size_t max_line)
    : stream_(s), max_line_(max_line),
      watch_(std::make_shared<Watch>(s.get_executor(), &s)) {}

template <class Stream>
LineReader<Stream>::~LineReader() {
    watch_->stopped = true;
    watch_->timer.cancel();
}

// Streams that may be a plain TCP connection: a socket, or smx::smtp::Stream
// before STARTTLS.
template <class Stream>
concept MaybePlainTcp = std::is_same_v<Stream, asio::ip::tcp::socket> ||
                        requires(Stream& s) { s.tls(); s.socket(); };

// The TCP socket when `s` is a plain connection now, whose readiness the
// socket itself tells (over TLS, OpenSSL may hold decrypted input the
// socket does not show); else null.
template <MaybePlainTcp Stream>
asio::ip::tcp::socket* plain_tcp(Stream& s) {
    if constexpr (std::is_same_v<Stream, asio::ip::tcp::socket>)
        return &s;
    else
        return s.tls() ? nullptr : &s.socket();
}

// asio's non_blocking(true) is an ioctl(2) each time it is called: only
// the first call per socket makes one (FIONBIO was 6 of SMTPS's 42 system
// calls per message when every read set it).
template <class Socket>
void make_non_blocking(Socket& s, boost::system::error_code& ec) {
    if (!s.non_blocking()) s.non_blocking(true, ec);
}

template <class Stream>
void LineReader<Stream>::reserve_room(std::size_t room) {
    // Move the unread part to the front when that is cheaper than growing.
    if (pos_ > 0 && (pos_ == end_ || cap_ - end_ < room)) {
        std::memmove(buf_, buf_ + pos_, end_ - pos_);
        end_ -= pos_;
        pos_ = 0;
    }
    if (cap_ - end_ >= room) return;
    auto bigger = std::make_unique_for_overwrite<char[]>(end_ + room);
    if (end_ > 0) std::memcpy(bigger.get(), buf_, end_);
    heap_ = std::move(bigger);
    buf_ = heap_.get();
    cap_ = end_ + room;
}

// With a buffer held and the last read full, input may be waiting (DATA,
// pipelining): read it at once. Otherwise the buffer goes and the wait is
// a receive into first_: asio's async_wait re-arms epoll (EPOLL_CTL_MOD)
// on every call, a receive waits with no system call beyond asio's own try
// (that MOD was 2.4 of SMTPS's system calls per message).
template <class Stream>
bool LineReader<Stream>::read_plain_now(asio::ip::tcp::socket& sock,
                                        boost::system::error_code& ec, std::size_t& n) {
    make_non_blocking(sock, ec);
    if (ec) return true;
    if (cap_ > 0 && more_) {
        reserve_room(read_room);
        const std::size_t want = cap_ - end_;
        n = sock.read_some(asio::buffer(buf_ + end_, want), ec);
        if (ec != asio::error::would_block && ec != asio::error::try_again) {
            more_ = n == want;
            return true;
        }
    }
    heap_.reset();
    buf_ = nullptr;
    cap_ = pos_ = end_ = 0;
    return false;
}

template <class Stream>
asio::awaitable<ReadStatus> LineReader<Stream>::fill(
    std::chrono::steady_clock::duration timeout) {
    // The deadline is a time stamp that one long-lived timer checks, so a
    // read costs no timer operation unless it must time out sooner than the
    // timer is already set to (asio's "deadline" example, without a second
    // coroutine per read).
    // A deadline that has passed ends the read even with input waiting: a
    // peer that sends without end would otherwise keep a reader busy that
    // never has to wait, and the timer never gets its turn.
    if (timeout <= std::chrono::steady_clock::duration::zero()) co_return ReadStatus::timeout;
    Watch& w = *watch_;
    w.deadline = std::chrono::steady_clock::now() + timeout;
    w.fired = false;
    w.reading = true;
    if (!w.waiting || w.deadline < w.timer.expiry()) Watch::arm(watch_);
    boost::system::error_code ec;
    std::size_t n = 0;
    bool done = false;
    if constexpr (MaybePlainTcp<Stream>) {
        // The wait is awaited here, not in a coroutine of its own: one frame
        // fewer to create and, at 1000 sessions, to find cold when input comes.
        if (auto* sock = plain_tcp(stream_); sock && pos_ == end_) {
            if (!read_plain_now(*sock, ec, n)) {
                std::tie(ec, n) = co_await sock->async_receive(
                    asio::buffer(first_), smx::await_tuple);
                more_ = n == first_.size();
                // What came is read where it landed: no allocation for a command line.
                buf_ = first_.data();
                cap_ = first_.size();
            }
            done = true;
        }
    }
    if (!done) {
        reserve_room(read_room);
        std::tie(ec, n) = co_await stream_.async_read_some(
            asio::buffer(buf_ + end_, cap_ - end_), smx::await_tuple);
    }
    w.reading = false;
    end_ += n;
    if (n > 0) co_return ReadStatus::ok;
    if (w.fired) co_return ReadStatus::timeout;
    if (ec) co_return ec == asio::error::eof ? ReadStatus::eof : ReadStatus::error;
    co_return ReadStatus::ok;
}

template <class Stream>
asio::awaitable<Line> LineReader<Stream>::read_line(
    std::chrono::steady_clock::duration timeout) {
    // One deadline for the whole line, however slowly it drips in.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::size_t scanned = 0;
    for (;;) {
        std::string_view avail(buf_ + pos_, end_ - pos_);
        // Room for max_line_ bytes of text plus CRLF.
        const std::size_t limit = std::min(avail.size(), max_line_ + 2);
        const auto lf = avail.substr(0, limit).find('\n', scanned);
        if (lf != std::string_view::npos) {
            Line l;
            l.complete = true;
            l.bare_lf = lf == 0 || avail[lf - 1] != '\r';
            l.text = avail.substr(0, l.bare_lf ? lf : lf - 1);
            pos_ += lf + 1;
            co_return l;
        }
        if (avail.size() >= max_line_ + 2) {
            // Cut: hand out max_line bytes, keep a trailing CR for the next
            // chunk so that a CRLF split across the cut is still seen.
            std::size_t n = max_line_;
            if (avail[n - 1] == '\r') --n;
            Line l;
            l.text = avail.substr(0, n);
            pos_ += n;
            co_return l;
        }
        scanned = avail.size();
        const auto st = co_await fill(deadline - std::chrono::steady_clock::now());
        if (st != ReadStatus::ok) {
            Line l;
            l.status = st;
            co_return l;
        }
    }
}

template <class Stream>
asio::awaitable<Line> LineReader<Stream>::read_bytes(
    std::size_t max, std::chrono::steady_clock::duration timeout) {
    Line l;
    if (pos_ == end_) {
        l.status = co_await fill(timeout);
        if (l.status != ReadStatus::ok) co_return l;
        if (pos_ == end_) {  // a read that brought nothing and no error
            l.status = ReadStatus::error;
            co_return l;
        }
    }
    const std::size_t n = std::min(max, end_ - pos_);
    l.text = std::string_view(buf_ + pos_, n);
    pos_ += n;
    co_return l;
}

template <class Stream>
asio::awaitable<ReadStatus> LineReader<Stream>::skip_line(
    std::chrono::steady_clock::duration timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
        std::string_view avail(buf_ + pos_, end_ - pos_);
        const auto lf = avail.find('\n');
        if (lf != std::string_view::npos) {
            pos_ += lf + 1;
            co_return ReadStatus::ok;
        }
        pos_ = end_;
        const auto st = co_await fill(deadline - std::chrono::steady_clock::now());
        if (st != ReadStatus::ok) co_return st;
    }
}

template <class Stream>
asio::awaitable<Reply> read_reply(LineReader<Stream>& r,
                                  std::chrono::steady_clock::duration timeout) {
    // One deadline for the whole reply: a peer dripping continuation lines
    // cannot stretch it. Every line is read and checked, only the first
    // reply_lines_keep lines and reply_text_keep bytes of text are kept: a
    // next hop's long 250 to the end of data is a delivery, not a broken
    // connection (which would send the message again).
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto left = [&] { return deadline - std::chrono::steady_clock::now(); };
    std::size_t kept = 0;
    Reply rep;
    for (;;) {
        const Line l = co_await r.read_line(left());
        if (l.status != ReadStatus::ok) {
            rep.status = l.status;
            rep.code = 0;
            co_return rep;
        }
        if (!l.complete) {  // absurdly long reply line: drop the rest
            // Awaited into a local: GCC 12 miscompiles co_await in conditions.
            const ReadStatus skipped = co_await r.skip_line(left());
            if (skipped != ReadStatus::ok) {
                rep.status = ReadStatus::error;
                rep.code = 0;
                co_return rep;
            }
        }
        const std::string_view t = l.text;
        const bool digits = t.size() >= 3 && t[0] >= '2' && t[0] <= '5' &&
                            t[1] >= '0' && t[1] <= '9' && t[2] >= '0' && t[2] <= '9';
        const bool sep_ok = t.size() == 3 || t[3] == ' ' || t[3] == '-';
        if (!digits || !sep_ok) {
            rep.status = ReadStatus::error;
            rep.code = 0;
            co_return rep;
        }
        const int code = (t[0] - '0') * 100 + (t[1] - '0') * 10 + (t[2] - '0');
        if (rep.lines.empty()) {
            rep.code = code;
        } else if (code != rep.code) {
            rep.status = ReadStatus::error;
            rep.code = 0;
            co_return rep;
        }
        const std::string_view text = t.size() > 4 ? t.substr(4) : std::string_view{};
        if (rep.lines.empty() || (rep.lines.size() < reply_lines_keep && kept < reply_text_keep)) {
            const std::size_t keep =
                std::min({text.size(), reply_line_keep, reply_text_keep - kept});
            kept += keep;
            // A peer's CR, NUL or escape must not reach our logs, records or
            // DSNs (postfix's smtp client masks them the same way).
            rep.lines.push_back(printable(text.substr(0, keep)));
            if (keep < text.size()) rep.truncated = true;
            if (rep.lines.size() == 1) rep.enhanced = split_enhanced(rep.lines[0]).first;
        } else {
            rep.truncated = true;
        }
        if (t.size() == 3 || t[3] == ' ') co_return rep;
    }
}

template <class Stream>
bool try_write(Stream& s, std::string_view& data) {
    if constexpr (MaybePlainTcp<Stream>) {
        if (auto* sock = plain_tcp(s); sock && !data.empty()) {
            boost::system::error_code ec;
            make_non_blocking(*sock, ec);
            const std::size_t n = ec ? 0 : sock->write_some(asio::buffer(data), ec);
            if (ec && ec != asio::error::would_block && ec != asio::error::try_again) return false;
            data.remove_prefix(n);
        }
    }
    return true;
}

template <class Stream>
asio::awaitable<bool> write_all(Stream& s, std::string_view data,
                                std::chrono::steady_clock::duration timeout) {
    using namespace asio::experimental::awaitable_operators;
    // Replies and commands are small and the socket buffer is rarely full:
    // one plain write usually does it, with no timer and no parallel group
    // (whose co_spawn frames are several heap blocks per write).
    if (!try_write(s, data)) co_return false;
    if (data.empty()) co_return true;
    asio::steady_timer timer(co_await asio::this_coro::executor, timeout);
    auto res = co_await (
        asio::async_write(s, asio::buffer(data), asio::as_tuple(asio::use_awaitable)) ||
        timer.async_wait(asio::as_tuple(asio::use_awaitable)));
    if (res.index() == 1) co_return false;
    co_return !std::get<0>(std::get<0>(res));
}

} // namespace smx::smtp
