// The SMTP reply parser (SMTPC's view of a next hop): replies until the
// stream ends or breaks. Oracle: codes in range, kept text within its caps
// and printable.
#include "fuzz/stream.hpp"
#include "libsm/smtp_io.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view input(reinterpret_cast<const char*>(data), size);
    fuzz::with_stream(input, [](fuzz::unix_socket& s) -> boost::asio::awaitable<void> {
        smx::smtp::LineReader<fuzz::unix_socket> r(s);
        for (;;) {
            const auto rep = co_await smx::smtp::read_reply(r, std::chrono::seconds(5));
            if (rep.status != smx::smtp::ReadStatus::ok) {
                if (rep.code != 0) std::abort();
                break;
            }
            if (rep.code < 200 || rep.code > 599 || rep.lines.empty()) std::abort();
            if (rep.lines.size() > smx::smtp::reply_lines_keep) std::abort();
            std::size_t kept = 0;
            for (const auto& l : rep.lines) {
                kept += l.size();
                for (const char c : l)
                    if (c < ' ' || c > '~') std::abort();  // masked at the boundary
            }
            if (kept > smx::smtp::reply_text_keep) std::abort();
            (void)rep.summary();
            (void)rep.text();
        }
    });
    return 0;
}
