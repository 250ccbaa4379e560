// The maildrop file codec (libsm/maildrop_file.hpp): the input as a file
// smx-pickup reads, and as a submission smx-postdrop reads, and its content
// through ContentCheck. Oracles: what decodes re-encodes to bytes that
// decode to the same envelope; every address it gives is one SMTPS would
// take (no CR, LF, NUL, '<' or '>', at most 254 bytes); content that
// ContentCheck passes has CRLF line ends only and ends in one.
#include "libsm/maildrop_file.hpp"

#include <cstdlib>

namespace {

void check_address(const std::string& a) {
    if (a.size() > 254 || a.find_first_of(std::string("\r\n<>\0", 5)) != std::string::npos)
        std::abort();
}

void round_trip(std::string_view in, smx::maildrop::Kind kind) {
    std::string err;
    const auto n = smx::maildrop::fields_length(in, err);
    if (!n || smx::maildrop::prefix_size + *n > in.size()) return;
    const auto e = smx::maildrop::decode(in.substr(smx::maildrop::prefix_size, *n), kind, err);
    if (!e) return;
    check_address(e->sender);
    for (const auto& r : e->rcpts) check_address(r);
    const std::string again = smx::maildrop::encode(*e, kind);
    const auto m = smx::maildrop::fields_length(again, err);
    if (!m) std::abort();
    const auto e2 = smx::maildrop::decode(std::string_view(again).substr(smx::maildrop::prefix_size), kind, err);
    if (!e2 || e2->sender != e->sender || e2->rcpts != e->rcpts || e2->uid != e->uid ||
        e2->arrival_us != e->arrival_us || e2->content_size != e->content_size)
        std::abort();
    // The content after the envelope, in two pieces cut where the first byte says.
    const std::string_view content = in.substr(smx::maildrop::prefix_size + *n);
    smx::maildrop::ContentCheck check;
    const std::size_t cut = content.empty() ? 0 : static_cast<unsigned char>(content[0]) % (content.size() + 1);
    check.feed(content.substr(0, cut));
    check.feed(content.substr(cut));
    if (!check.finish().empty()) return;
    for (std::size_t i = 0; i < content.size(); ++i) {
        if (content[i] == '\n' && (i == 0 || content[i - 1] != '\r')) std::abort();
        if (content[i] == '\r' && (i + 1 == content.size() || content[i + 1] != '\n')) std::abort();
    }
    if (!content.empty() && !content.ends_with("\r\n")) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    round_trip(in, smx::maildrop::Kind::file);
    round_trip(in, smx::maildrop::Kind::submission);
    return 0;
}
