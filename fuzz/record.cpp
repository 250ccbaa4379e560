// The record decoder: a frame header, then the body decoded as every record
// type. Oracles: what decodes re-encodes to something that decodes again;
// a TA_COMMIT's content-id that parses as a content segment reference has that
// one spelling.
#include "libsm/content_segment.hpp"
#include "libsm/messages.hpp"
#include "libsm/record.hpp"

#include <cstdlib>

namespace {

template <class T>
void round_trip(const smx::rec::Frame& f) {
    std::string err;
    auto v = smx::msg::decode<T>(f, err);
    if (!v) return;
    const std::string wire = smx::msg::encode(*v, f.hdr.req_id);
    const auto h = smx::rec::parse_header(wire);
    if (!h) std::abort();
    const smx::rec::Frame again{*h, wire.substr(smx::rec::header_size)};
    if (!smx::msg::decode<T>(again, err)) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    if (in.size() < smx::rec::header_size) return 0;
    auto h = smx::rec::parse_header(in);
    if (!h) return 0;
    smx::rec::Frame f{*h, std::string(in.substr(smx::rec::header_size))};
    (void)smx::rec::parse_fields(f.body);
    round_trip<smx::msg::Hello>(f);
    round_trip<smx::msg::HelloAck>(f);
    round_trip<smx::msg::TaCommit>(f);
    round_trip<smx::msg::TaAck>(f);
    round_trip<smx::msg::SmtpsLoad>(f);
    round_trip<smx::msg::Deliver>(f);
    round_trip<smx::msg::Result>(f);
    round_trip<smx::msg::CtlRequest>(f);
    round_trip<smx::msg::CtlReply>(f);
    std::string err;
    if (auto ta = smx::msg::decode<smx::msg::TaCommit>(f, err))
        if (auto ref = smx::content::parse_segment_ref(ta->content_id))
            if (smx::content::segment_ref(ref->segment, ref->offset) != ta->content_id) std::abort();
    if (auto env = smx::msg::envelope_from_bytes(f.body, err))
        if (!smx::msg::envelope_from_bytes(smx::msg::envelope_bytes(*env), err)) std::abort();
    return 0;
}
