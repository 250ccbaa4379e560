// One connection to one milter for one SMTP session (or one local
// submission), as postfix keeps one per smtpd session: libmilter keeps its
// per-connection state (the CONNECT and HELO it saw, its own context) for
// the life of the socket, so a connection cannot be shared by sessions.
//
// Every call is a coroutine with a deadline (one per connection, watched by
// a coroutine of its own: no timer per read); an error of any kind (refused,
// reset, timeout, garbage, a reply over the size bound, an edit not
// negotiated) comes back as Result::error, the socket is closed and every
// later call returns Result::dead at once, so the caller applies the
// milter's default action (logged once, when the error happens).
//
// What the milter answers nothing to (its SMFIP_NR_* steps) waits, with the
// macros, for the next packet it answers (or ABORT, QUIT): N header fields
// with SMFIP_NR_HDR cost one write, not N. A write error comes back there.
#pragma once

#include "libsm/milter_protocol.hpp"

#include <boost/asio.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::milter {

namespace asio = boost::asio;

struct ConnSettings {
    std::string socket;  // as configured, for logs
    SocketSpec where;
    std::chrono::steady_clock::duration connect_timeout = std::chrono::seconds(30);
    std::chrono::steady_clock::duration command_timeout = std::chrono::seconds(30);
    std::chrono::steady_clock::duration content_timeout = std::chrono::seconds(300);
    std::uint32_t version = max_version;
    std::size_t max_packet = default_max_packet;
};

// The value of a macro ("j", "{client_addr}"), or nullopt when smx has none
// (then it is not sent).
using MacroLookup = std::function<std::optional<std::string>(std::string_view name)>;

// The macros sent at each stage unless the milter names its own
// (SETSYMLIST): postfix's milter_*_macros defaults, and what smx has beyond.
const std::vector<std::string>& default_macros(Stage s);

struct Result {
    enum Status { ok, error, dead };
    Status status = ok;
    // ok: the final reply (CONTINUE, ACCEPT, REJECT, TEMPFAIL, DISCARD,
    // SKIP, REPLYCODE with code and lines).
    Reply reply;
    // End of message: the edits in the order they came (QUARANTINE among
    // them), REPLBODY packets joined into one.
    std::vector<Reply> edits;
    // error: what went wrong, for the log ("can't read SMFIC_RCPT reply
    // packet header: Connection reset by peer").
    std::string what;
};

class Conn {
public:
    Conn(asio::any_io_executor ex, ConnSettings s);
    ~Conn();
    Conn(const Conn&) = delete;
    Conn& operator=(const Conn&) = delete;

    // Connects and negotiates (once per Conn); an error result when it cannot.
    asio::awaitable<Result> open();

    asio::awaitable<Result> connect(const MacroLookup& m, std::string_view host, Family family,
                                    std::uint16_t port, std::string_view addr);
    asio::awaitable<Result> helo(const MacroLookup& m, std::string_view name);
    asio::awaitable<Result> mail(const MacroLookup& m, const std::vector<std::string>& args);
    asio::awaitable<Result> rcpt(const MacroLookup& m, const std::vector<std::string>& args);
    asio::awaitable<Result> data(const MacroLookup& m);
    // value: as the message has it after the colon (leading space
    // included); the space goes unless the milter asked for it.
    asio::awaitable<Result> header(const MacroLookup& m, std::string_view name,
                                   std::string_view value);
    asio::awaitable<Result> eoh(const MacroLookup& m);
    // Any number of octets: sent in chunks of at most chunk_size. After a
    // SKIP reply the rest of the body is not sent.
    asio::awaitable<Result> body(const MacroLookup& m, std::string_view bytes);
    // End of message: the final reply and the edits; a body replacement
    // over max_body octets is an error.
    asio::awaitable<Result> eom(const MacroLookup& m, std::size_t max_body);
    // A command SMTPS does not know (the milter sees it before the 502).
    asio::awaitable<Result> unknown(const MacroLookup& m, std::string_view line);
    // The transaction ends without a message (RSET, MAIL again, an error):
    // no reply, so only a write error comes back.
    asio::awaitable<Result> abort();
    // The session ends; the socket is closed.
    asio::awaitable<Result> quit();

    bool alive() const { return open_; }
    const Negotiated& negotiated() const { return neg_; }
    const std::string& label() const { return s_.socket; }

private:
    using clock = std::chrono::steady_clock;
    struct Watch;
    // Puts the stage's macros and, with put(out_), the packet of c unless
    // the milter does not want c; sends them unless it answers nothing to
    // c, and reads the replies (to OPTNEG: the negotiation, into neg_).
    template <class Put>
    asio::awaitable<Result> event(Cmd c, std::optional<Stage> stage, const MacroLookup& m,
                                  Put put, clock::duration timeout, std::size_t max_body = 0);
    // Writes what of out_ the socket takes now, without waiting (nearly
    // always all of it; the rest stays in out_): an error text, or empty.
    // No coroutine frame for the usual case.
    std::string write_now();
    // Writes the rest of out_ within timeout.
    asio::awaitable<std::string> write_rest(clock::duration timeout);
    // A whole packet from rbuf_ into code and in_ (true), or false when
    // more must be read first; a bad length goes to err (true).
    bool take_packet(char& code, std::string& err);
    // The length field at the start of rbuf_ (4 octets there).
    Frame frame() const;
    // What the next read asks for: the rest of the packet, or read_room.
    std::size_t want() const;
    void put_stage_macros(Cmd c, Stage stage, const MacroLookup& m);
    // A read, write or connect begins that must end within timeout / has
    // ended with ec (timed_out when the deadline ended it).
    void begin_wait(clock::duration timeout);
    boost::system::error_code end_wait(boost::system::error_code ec);
    static asio::awaitable<void> watchdog(std::shared_ptr<Watch> w);
    Result fail(std::string what);
    static Result dead();
    bool edit_allowed(Act a) const;

    ConnSettings s_;
    asio::generic::stream_protocol::socket sock_;
    bool open_ = false;
    bool skip_body_ = false;
    Negotiated neg_;
    std::string out_;  // the packets of the next write
    std::string in_;   // the data of the last packet read
    std::string rbuf_;  // bytes read past it: the next packets, or their start
    std::shared_ptr<Watch> watch_;  // the deadline, shared with the watchdog
};

} // namespace smx::milter
