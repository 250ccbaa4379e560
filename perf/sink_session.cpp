#include "perf/sink_session.hpp"

#include "perf/common.hpp"

#include "libsm/domain.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/smtp_stream.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <vector>

namespace smx::perf {

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using Reader = smx::smtp::LineReader<smx::smtp::Stream>;
using Duration = std::chrono::steady_clock::duration;

constexpr int max_errors = 20;  // then 421 and close, like a real server

std::string upper(std::string_view s) {
    std::string o(s);
    for (auto& c : o) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    return o;
}

// The address inside <...> (or the bare argument), lower-cased for hashing.
std::string address_of(std::string_view arg) {
    const auto lt = arg.find('<');
    const auto gt = arg.find('>', lt == std::string_view::npos ? 0 : lt);
    if (lt != std::string_view::npos && gt != std::string_view::npos)
        arg = arg.substr(lt + 1, gt - lt - 1);
    return smx::lower(arg);
}

// Recipients fail by hash of the address: the same recipient always gets the
// same answer, so a relay's retry of a 4xx recipient fails again.
int rcpt_verdict(const SinkOptions& o, const std::string& addr) {
    if (o.tempfail_pct <= 0 && o.permfail_pct <= 0) return 250;
    const double h = static_cast<double>(fnv1a(addr) % 10000) / 100.0;
    if (h < o.tempfail_pct) return 451;
    if (h < o.tempfail_pct + o.permfail_pct) return 550;
    return 250;
}

// Reads DATA up to CRLF.CRLF, unstuffing; appends to `out` when capturing.
// Returns false when the connection broke or timed out.
asio::awaitable<bool> read_data(Reader& rd, Duration t, std::string* out, std::uint64_t& bytes) {
    bool line_start = true, after_crlf = true;
    for (;;) {
        const smx::smtp::Line l = co_await rd.read_line(t);
        if (l.status != smx::smtp::ReadStatus::ok) co_return false;
        std::string_view text = l.text;
        if (line_start && after_crlf && l.complete && !l.bare_lf && text == ".") co_return true;
        if (line_start && !text.empty() && text[0] == '.') text.remove_prefix(1);
        const std::string_view eol = !l.complete ? "" : l.bare_lf ? "\n" : "\r\n";
        bytes += text.size() + eol.size();
        if (out) {
            out->append(text);
            out->append(eol);
        }
        line_start = l.complete;
        after_crlf = l.complete && !l.bare_lf;
    }
}

// Writes a captured message under a temporary name, then renames it, so a
// test polling the directory never sees half a message.
bool capture(const std::string& dir, std::uint64_t seq, const std::string& content) {
    char name[64];
    std::snprintf(name, sizeof name, "/msg-%08llu", static_cast<unsigned long long>(seq));
    const std::string final_name = dir + name;
    const std::string tmp = final_name + ".tmp";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return false;
    std::size_t off = 0;
    while (off < content.size()) {
        const ssize_t n = ::write(fd, content.data() + off, content.size() - off);
        if (n <= 0) break;
        off += static_cast<std::size_t>(n);
    }
    const bool ok = ::close(fd) == 0 && off == content.size();
    return ok && ::rename(tmp.c_str(), final_name.c_str()) == 0;
}

struct Transaction {
    bool mail = false;
    std::string mail_arg;
    std::vector<std::string> rcpts;
};

} // namespace

// GCC 12 warns falsely that this coroutine's frame is freed with a
// mismatched operator delete once it holds an smx::smtp::Stream (GCC PR
// 109224, fixed in GCC 13); Boost.Asio allocates and frees the frame itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
asio::awaitable<void> serve(Sink& sink, tcp::socket sock) {
    const auto t = sink.opt.idle_timeout;
    auto& st = sink.stats;
    ++st.sessions;
    boost::system::error_code ignored;
    sock.set_option(tcp::no_delay(true), ignored);
    smx::smtp::Stream s(std::move(sock));
    Reader rd(s);
    std::string out = "220 " + sink.opt.hostname + " ESMTP smx-sink\r\n";
    Transaction ta;
    int errors = 0;
    bool quit = false;
    while (!quit) {
        // PIPELINING: answer a whole batch of commands in one write.
        if (!out.empty() && rd.buffered() == 0) {
            const auto flushed = co_await smx::smtp::write_all(s, out, t);
            if (!flushed) break;
            out.clear();
        }
        const smx::smtp::Line l = co_await rd.read_line(t);
        if (l.status != smx::smtp::ReadStatus::ok) {
            if (l.status == smx::smtp::ReadStatus::timeout) ++st.errors["timeout"];
            break;
        }
        if (!l.complete) {
            const auto skipped = co_await rd.skip_line(t);
            if (skipped != smx::smtp::ReadStatus::ok) break;
            out += "500 5.5.2 Line too long\r\n";
            ++errors;
            continue;
        }
        const std::string_view line = l.text;
        const std::string verb = upper(line.substr(0, line.find(' ')));
        const std::string_view arg = line.size() > verb.size() ? line.substr(verb.size() + 1) : "";
        if (verb == "EHLO") {
            out += "250-" + sink.opt.hostname + "\r\n";
            if (sink.opt.pipelining) out += "250-PIPELINING\r\n";
            if (sink.tls && !s.tls()) out += "250-STARTTLS\r\n";
            out += "250-SIZE 0\r\n250-8BITMIME\r\n250 ENHANCEDSTATUSCODES\r\n";
            ta = {};
        } else if (verb == "HELO") {
            out += "250 " + sink.opt.hostname + "\r\n";
            ta = {};
        } else if (verb == "MAIL") {
            ta = {};
            ta.mail = true;
            ta.mail_arg = std::string(arg.size() > 5 ? arg.substr(5) : arg);  // after "FROM:"
            out += "250 2.1.0 Ok\r\n";
        } else if (verb == "RCPT") {
            if (!ta.mail) {
                out += "503 5.5.1 Need MAIL first\r\n";
                ++errors;
                continue;
            }
            const int v = rcpt_verdict(sink.opt, address_of(arg));
            if (v == 250) {
                ta.rcpts.emplace_back(arg.size() > 3 ? arg.substr(3) : arg);  // after "TO:"
                out += "250 2.1.5 Ok\r\n";
            } else if (v == 451) {
                ++st.rcpt_tempfail;
                out += "451 4.3.0 smx-sink: recipient deferred on purpose\r\n";
            } else {
                ++st.rcpt_permfail;
                out += "550 5.1.1 smx-sink: recipient refused on purpose\r\n";
            }
        } else if (verb == "DATA") {
            if (ta.rcpts.empty()) {
                out += ta.mail ? "554 5.5.1 No valid recipients\r\n" : "503 5.5.1 Need MAIL first\r\n";
                continue;
            }
            out += "354 End data with <CR><LF>.<CR><LF>\r\n";
            const auto wrote = co_await smx::smtp::write_all(s, out, t);
            if (!wrote) break;
            out.clear();
            std::string content;
            if (!sink.opt.capture_dir.empty()) {
                content = "MAIL FROM:" + ta.mail_arg + "\n";
                for (const auto& r : ta.rcpts) content += "RCPT TO:" + r + "\n";
                content += "\n";
            }
            const auto got_data = co_await read_data(rd, t, sink.opt.capture_dir.empty() ? nullptr : &content, st.bytes);
            if (!got_data) {
                ++st.errors["data_io"];
                break;
            }
            if (!sink.opt.capture_dir.empty() && !capture(sink.opt.capture_dir, st.msgs, content)) {
                ++st.errors["capture"];
                out += "451 4.3.0 smx-sink: cannot write capture file\r\n";
                ta = {};
                continue;
            }
            ++st.msgs;
            st.rcpts += ta.rcpts.size();
            st.t_last = epoch_seconds();
            if (st.t_first == 0) st.t_first = st.t_last;
            out += "250 2.0.0 Ok: queued as " + std::to_string(st.msgs) + "\r\n";
            ta = {};
            sink.on_message();
        } else if (verb == "STARTTLS" && sink.tls && !s.tls()) {
            const auto ready = co_await smx::smtp::write_all(s, out + "220 2.0.0 Ready to start TLS\r\n", t);
            if (!ready) break;
            out.clear();
            rd.discard();  // nothing sent in plaintext counts after TLS (RFC 3207)
            const std::string err = co_await s.start_tls(*sink.tls, asio::ssl::stream_base::server, t);
            if (!err.empty()) {
                ++st.errors["tls_handshake"];
                break;
            }
            ++st.tls_sessions;
            ta = {};  // the session starts over: EHLO again
        } else if (verb == "RSET") {
            ta = {};
            out += "250 2.0.0 Ok\r\n";
        } else if (verb == "NOOP") {
            out += "250 2.0.0 Ok\r\n";
        } else if (verb == "VRFY") {
            out += "252 2.0.0 Try it\r\n";
        } else if (verb == "QUIT") {
            out += "221 2.0.0 Bye\r\n";
            quit = true;
        } else {
            out += "502 5.5.2 Command not implemented\r\n";
            ++errors;
        }
        if (errors > max_errors) {
            out += "421 4.7.0 Too many errors\r\n";
            ++st.errors["too_many_errors"];
            quit = true;
        }
    }
    if (!out.empty()) co_await smx::smtp::write_all(s, out, std::chrono::seconds(5));
    // Let the client close first: the TIME_WAIT then stays on the client's
    // side, where connect() handles it. A server-side TIME_WAIT makes the
    // client's next SYN on a reused port wait for a 1 s retransmit.
    if (quit) co_await rd.read_line(std::chrono::seconds(2));
    s.socket().close(ignored);
}

#pragma GCC diagnostic pop

} // namespace smx::perf
