// The DATA reader: LineReader pieces through ContentReader (end of data,
// dot-unstuffing, bare CR/LF, size limit). The first byte picks the mode.
// Oracle: what is stored has CRLF line ends only, lines of at most 998
// octets, within the size limit;
// MessageParts splits it into fields that each begin with a name and end in
// a line end, and the parts put together are what was stored.
#include "fuzz/stream.hpp"
#include "smtps/content.hpp"
#include "libsm/message_parts.hpp"

#include <cstdlib>
#include <string>

namespace {

struct Joined {
    std::string all;
    int ends = 0;
    bool cut = false;  // a field without its line end: the content's last bytes
    void header(std::string_view f) {
        if (ends != 0 || cut || f.empty() || f.front() == ' ' || f.front() == '\t' ||
            f.find(':') == std::string_view::npos)
            std::abort();
        cut = f.back() != '\n';
        all.append(f);
    }
    void end_of_headers(bool blank) {
        if (ends++ != 0) std::abort();
        if (blank) all.append("\r\n");
    }
    void body(std::string_view b) {
        if (ends != 1 || cut) std::abort();
        all.append(b);
    }
};

// The stored content through MessageParts, in pieces as ContentReader hands them out.
void check_parts(const std::string& stored, std::size_t piece, std::size_t max_header) {
    Joined j;
    smx::MessageParts parts(max_header);
    for (std::size_t i = 0; i < stored.size(); i += piece)
        parts.feed(std::string_view(stored).substr(i, piece), j);
    parts.finish(j);
    if (j.ends != 1 || j.all != stored) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const bool normalize = data[0] & 1;
    const std::uint64_t max_size = 16u + (data[0] >> 1) * 64u;
    const std::size_t max_line = data[0] & 2 ? 64 * 1024 : 16;  // short: long-line pieces
    std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
    fuzz::with_stream(input, [&](fuzz::unix_socket& s) -> boost::asio::awaitable<void> {
        smx::smtp::LineReader<fuzz::unix_socket> r(s, max_line);
        smx::smtps::ContentReader c(normalize, max_size);
        std::string out;
        for (;;) {
            const auto l = co_await r.read_line(std::chrono::seconds(5));
            if (l.status != smx::smtp::ReadStatus::ok) break;
            if (c.feed(l, [&](std::string_view b) { out.append(b); })) break;
        }
        const auto& res = c.result();
        if (res.too_big || res.bare_eol) co_return;
        // Each break of a line over 998 octets adds CRLF SPACE.
        if (out.size() > max_size + 3 * (max_size / 997 + 1)) std::abort();
        std::size_t col = 0;
        for (const char ch : out) {
            col = ch == '\n' ? 0 : col + 1;
            if (col > smx::line_length_limit + 1) std::abort();  // + its CR
        }
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (out[i] == '\r' && (i + 1 == out.size() || out[i + 1] != '\n')) {
                // A piece cut at the line limit may end in CR; its LF follows.
                if (i + 1 == out.size()) break;
                std::abort();
            }
            if (out[i] == '\n' && (i == 0 || out[i - 1] != '\r')) std::abort();
        }
        check_parts(out, 1 + data[0] % 7, 16 + data[0]);
    });
    return 0;
}
