// The DATA reader: LineReader pieces through ContentReader (end of data,
// dot-unstuffing, bare CR/LF, size limit). The first byte picks the mode.
// Oracle: what is stored has CRLF line ends only, within the size limit.
#include "fuzz/stream.hpp"
#include "smtps/content.hpp"

#include <cstdlib>
#include <string>

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
        if (out.size() > max_size) std::abort();
        for (std::size_t i = 0; i < out.size(); ++i) {
            if (out[i] == '\r' && (i + 1 == out.size() || out[i + 1] != '\n')) {
                // A piece cut at the line limit may end in CR; its LF follows.
                if (i + 1 == out.size()) break;
                std::abort();
            }
            if (out[i] == '\n' && (i == 0 || out[i - 1] != '\r')) std::abort();
        }
    });
    return 0;
}
