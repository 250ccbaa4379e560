// SMTP line I/O shared by the server, the client and the perf tools:
// a bounded line reader with a per-read deadline and a reply parser.
#pragma once

#include <boost/asio.hpp>
#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <memory>
#include <string_view>
#include <vector>

namespace smx::smtp {

namespace asio = boost::asio;
using namespace std::chrono_literals;

enum class ReadStatus { ok, eof, timeout, error };

struct Line {
    ReadStatus status = ReadStatus::ok;
    // The bytes of this line or chunk, without the terminator.
    std::string_view text;
    // True when the line ended in LF; false when the chunk was cut at the
    // length limit (more of the same line follows) or at EOF/error.
    bool complete = false;
    // The terminator was a bare LF (no CR before it).
    bool bare_lf = false;
};

// Reads lines from a stream (TCP socket or SSL stream) with a deadline per
// read. Returned views are valid until the next call. On a plain TCP
// connection the reader holds no buffer while it waits with nothing unread:
// it waits with a receive into a small array of its own and only then takes
// one, so an idle connection costs a few KB, not the 16 KiB of a read.
template <class Stream>
class LineReader {
public:
    explicit LineReader(Stream& s, std::size_t max_line = 4096);
    ~LineReader();
    LineReader(const LineReader&) = delete;
    LineReader& operator=(const LineReader&) = delete;

    void set_max_line(std::size_t n) { max_line_ = n; }
    // Bytes already buffered beyond what was consumed (pipelined input).
    std::size_t buffered() const { return end_ - pos_; }
    // Bytes of buffer taken from the heap now (0 while a plain TCP
    // connection waits idle, and while what it holds fits in first_).
    std::size_t held() const { return heap_ ? cap_ : 0; }
    // Drops the buffered input; returns how many bytes went. After STARTTLS
    // nothing the client sent in plaintext may be read as if it came over
    // TLS (CVE-2011-0411).
    std::size_t discard() {
        const std::size_t n = end_ - pos_;
        pos_ = end_ = 0;
        return n;
    }

    // Reads up to the next LF, or a chunk of max_line bytes of a longer line
    // (max_line counts the text without its CRLF).
    asio::awaitable<Line> read_line(std::chrono::steady_clock::duration timeout);

    // Up to max raw octets (a BDAT chunk, whatever lines it holds): what is
    // buffered, else what one read brings. text is empty only when status
    // is not ok.
    asio::awaitable<Line> read_bytes(std::size_t max, std::chrono::steady_clock::duration timeout);

    // Skips the rest of an over-long line; ok when LF was found.
    asio::awaitable<ReadStatus> skip_line(std::chrono::steady_clock::duration timeout);

private:
    // The read deadline: shared with the timer's handler, which may run
    // after the reader is gone.
    struct Watch {
        Watch(asio::any_io_executor ex, Stream* s) : timer(ex), stream(s) {}
        asio::steady_timer timer;
        Stream* stream;
        std::chrono::steady_clock::time_point deadline{};
        unsigned gen = 0;
        bool waiting = false, reading = false, fired = false, stopped = false;
        static void arm(const std::shared_ptr<Watch>& w);
    };

    static constexpr std::size_t read_room = 16384;  // what a read may bring
    asio::awaitable<ReadStatus> fill(std::chrono::steady_clock::duration timeout);

    Stream& stream_;
    std::size_t max_line_;
    // Makes room for `room` bytes after the unread data.
    void reserve_room(std::size_t room);
    // A plain TCP connection with nothing unread: reads what is there now
    // (true, with the outcome in ec and n), or lets the buffer go (false:
    // fill then waits for input in first_, holding no buffer meanwhile).
    bool read_plain_now(asio::ip::tcp::socket& sock, boost::system::error_code& ec,
                        std::size_t& n);

    // Data is [pos_, end_) of cap_ bytes at buf_: in first_ after a wait,
    // else in heap_.
    char* buf_ = nullptr;
    std::unique_ptr<char[]> heap_;
    std::size_t cap_ = 0;
    std::size_t pos_ = 0;
    std::size_t end_ = 0;
    bool more_ = false;  // the last read filled all it was given: more may be there
    std::shared_ptr<Watch> watch_;
    // What a wait for input receives first: an SMTP command or reply line,
    // or a small message's text.
    std::array<char, 2048> first_;
};

// How much of a reply is kept (postfix keeps about as much): the rest is
// read from the wire to the last line, so the stream stays in step, and
// dropped. A reply has no limit on its lines, only its deadline.
inline constexpr std::size_t reply_line_keep = 512;   // bytes of text per line
inline constexpr std::size_t reply_text_keep = 2048;  // bytes of text per reply
inline constexpr std::size_t reply_lines_keep = 100;  // lines per reply

// One parsed SMTP reply (possibly multi-line).
struct Reply {
    int code = 0;               // 0 when the connection failed before a reply
    std::string enhanced;       // "2.0.0" when the first line carries one
    std::vector<std::string> lines;  // text after "NNN-" / "NNN ", the first ones (see above)
    bool truncated = false;          // some text or lines were dropped
    ReadStatus status = ReadStatus::ok;
    // First line text without the enhanced code, for logs.
    std::string text() const;
    // "250 2.0.0 Ok" style single-line rendering of the whole reply.
    std::string summary() const;
};

// Reads one complete reply, to its last line, within `timeout` (for all of
// its lines, however many); a malformed line (no code, or another code than
// the first line's) makes code 0 with status error.
template <class Stream>
asio::awaitable<Reply> read_reply(LineReader<Stream>& r,
                                  std::chrono::steady_clock::duration timeout);

// Splits "X.Y.Z rest" into the enhanced code and rest; empty code when absent.
// Views into text: valid while it is.
std::pair<std::string_view, std::string_view> split_enhanced(std::string_view text);

// Any octet over 127: an address that needs SMTPUTF8 (RFC 6531).
bool has_8bit(std::string_view s);

// s with every byte outside printable US-ASCII as '?' (a tab as a space):
// for peer text echoed into a reply, a log line or a DSN, where a CR, a NUL
// or raw 8-bit would break the line or the header it goes into.
std::string printable(std::string_view s);

// One non-blocking write of what the socket buffer takes now, when `s` is
// plain TCP (over TLS the bytes must go through OpenSSL: nothing is
// written); what went is removed from `data`. False on an error.
template <class Stream>
bool try_write(Stream& s, std::string_view& data);

// Writes all of `data` with a deadline; false on error or timeout.
template <class Stream>
asio::awaitable<bool> write_all(Stream& s, std::string_view data,
                                std::chrono::steady_clock::duration timeout);

} // namespace smx::smtp

#include "libsm/smtp_io_impl.hpp"
