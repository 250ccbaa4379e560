// The record decoder: a frame header, then the body decoded as every record
// type. Oracles: what decodes re-encodes to something that decodes again;
// a TA_COMMIT's content-id that parses as a content segment reference has that
// one spelling.
#include "content_segment.hpp"
#include "messages.hpp"
#include "record.hpp"

#include <cstdlib>

namespace {

template <class T>
void round_trip(const sm::rec::Frame& f) {
    std::string err;
    auto v = sm::msg::decode<T>(f, err);
    if (!v) return;
    const std::string wire = sm::msg::encode(*v, f.hdr.req_id);
    const auto h = sm::rec::parse_header(wire);
    if (!h) std::abort();
    const sm::rec::Frame again{*h, wire.substr(sm::rec::header_size)};
    if (!sm::msg::decode<T>(again, err)) std::abort();
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view in(reinterpret_cast<const char*>(data), size);
    if (in.size() < sm::rec::header_size) return 0;
    auto h = sm::rec::parse_header(in);
    if (!h) return 0;
    sm::rec::Frame f{*h, std::string(in.substr(sm::rec::header_size))};
    (void)sm::rec::parse_fields(f.body);
    round_trip<sm::msg::Hello>(f);
    round_trip<sm::msg::HelloAck>(f);
    round_trip<sm::msg::TaCommit>(f);
    round_trip<sm::msg::TaAck>(f);
    round_trip<sm::msg::SmtpsLoad>(f);
    round_trip<sm::msg::Deliver>(f);
    round_trip<sm::msg::Result>(f);
    round_trip<sm::msg::CtlRequest>(f);
    round_trip<sm::msg::CtlReply>(f);
    std::string err;
    if (auto ta = sm::msg::decode<sm::msg::TaCommit>(f, err))
        if (auto ref = sm::content::parse_segment_ref(ta->content_id))
            if (sm::content::segment_ref(ref->segment, ref->offset) != ta->content_id) std::abort();
    if (auto env = sm::msg::envelope_from_bytes(f.body, err))
        if (!sm::msg::envelope_from_bytes(sm::msg::envelope_bytes(*env), err)) std::abort();
    return 0;
}
