#include "record.hpp"

#include "panic.hpp"

#include <cstring>

namespace sm::rec {

std::string put_u16(std::uint16_t v) {
    return {static_cast<char>(v >> 8), static_cast<char>(v)};
}
std::string put_u32(std::uint32_t v) {
    return put_u16(static_cast<std::uint16_t>(v >> 16)) + put_u16(static_cast<std::uint16_t>(v));
}
std::string put_u64(std::uint64_t v) {
    return put_u32(static_cast<std::uint32_t>(v >> 32)) + put_u32(static_cast<std::uint32_t>(v));
}
std::uint16_t get_u16(const char* p) {
    const auto* u = reinterpret_cast<const unsigned char*>(p);
    return static_cast<std::uint16_t>((u[0] << 8) | u[1]);
}
std::uint32_t get_u32(const char* p) {
    return (std::uint32_t{get_u16(p)} << 16) | get_u16(p + 2);
}
std::uint64_t get_u64(const char* p) {
    return (std::uint64_t{get_u32(p)} << 32) | get_u32(p + 4);
}

Header parse_header_unchecked(std::string_view b) {
    Header h;
    h.length = get_u32(b.data());
    h.type = get_u16(b.data() + 4);
    h.flags = get_u16(b.data() + 6);
    h.req_id = get_u64(b.data() + 8);
    return h;
}

std::optional<Header> parse_header(std::string_view b) {
    if (b.size() < header_size) return std::nullopt;
    const Header h = parse_header_unchecked(b);
    if (h.length > max_body) return std::nullopt;
    return h;
}

void Writer::put_tag(std::uint16_t tag, std::size_t len) {
    buf_ += put_u16(tag);
    buf_ += put_u32(static_cast<std::uint32_t>(len));
}

Writer& Writer::str(std::uint16_t tag, std::string_view v) {
    put_tag(tag, v.size());
    buf_.append(v);
    return *this;
}
Writer& Writer::u32(std::uint16_t tag, std::uint32_t v) {
    put_tag(tag, 4);
    buf_ += put_u32(v);
    return *this;
}
Writer& Writer::u64(std::uint16_t tag, std::uint64_t v) {
    put_tag(tag, 8);
    buf_ += put_u64(v);
    return *this;
}
Writer& Writer::nested(std::uint16_t tag, const Writer& inner) {
    return str(tag, inner.buf_);
}

std::string Writer::frame(std::uint16_t type, std::uint64_t req_id,
                          std::uint16_t flags) const {
    // A peer would refuse it: whoever built it broke a limit it must keep.
    if (buf_.size() > max_body)
        panic("record type " + std::to_string(type) + " of " + std::to_string(buf_.size()) +
              " bytes exceeds the frame limit");
    std::string f;
    f.reserve(header_size + buf_.size());
    f += put_u32(static_cast<std::uint32_t>(buf_.size()));
    f += put_u16(type);
    f += put_u16(flags);
    f += put_u64(req_id);
    f += buf_;
    return f;
}

std::optional<std::uint32_t> Field::as_u32() const {
    if (value.size() != 4) return std::nullopt;
    return get_u32(value.data());
}
std::optional<std::uint64_t> Field::as_u64() const {
    if (value.size() != 8) return std::nullopt;
    return get_u64(value.data());
}

std::optional<std::vector<Field>> parse_fields(std::string_view b) {
    std::vector<Field> out;
    std::size_t i = 0;
    while (i < b.size()) {
        if (b.size() - i < 6) return std::nullopt;
        Field f;
        f.tag = get_u16(b.data() + i);
        const std::uint32_t len = get_u32(b.data() + i + 2);
        i += 6;
        if (len > b.size() - i) return std::nullopt;
        f.value = b.substr(i, len);
        i += len;
        out.push_back(f);
    }
    return out;
}

} // namespace sm::rec
