#include "libsm/record.hpp"

#include "libsm/panic.hpp"

#include <cstring>

namespace smx::rec {

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

namespace {
// Room for a usual record (an envelope with a few recipients) in one
// allocation.
constexpr std::size_t initial_capacity = 512;

template <class Int>
void set_be(char* p, Int v) {
    for (std::size_t i = 0; i < sizeof(Int); ++i)
        p[i] = static_cast<char>(v >> (8 * (sizeof(Int) - 1 - i)));
}

template <class Int>
void put_be(std::string& out, Int v) {
    char b[sizeof(Int)];
    set_be(b, v);
    out.append(b, sizeof b);
}

template <class Int>
std::string be(Int v) {
    std::string s;
    put_be(s, v);
    return s;
}
} // namespace

std::string put_u16(std::uint16_t v) { return be(v); }
std::string put_u32(std::uint32_t v) { return be(v); }
std::string put_u64(std::uint64_t v) { return be(v); }

Writer::Writer() {
    buf_.reserve(initial_capacity);
    buf_.resize(header_size);
}

void Writer::put_tag(std::uint16_t tag, std::size_t len) {
    start();
    put_be(buf_, tag);
    put_be(buf_, static_cast<std::uint32_t>(len));
}

Writer& Writer::str(std::uint16_t tag, std::string_view v) {
    put_tag(tag, v.size());
    buf_.append(v);
    return *this;
}
Writer& Writer::u32(std::uint16_t tag, std::uint32_t v) {
    put_tag(tag, 4);
    put_be(buf_, v);
    return *this;
}
Writer& Writer::u64(std::uint16_t tag, std::uint64_t v) {
    put_tag(tag, 8);
    put_be(buf_, v);
    return *this;
}
Writer& Writer::nested(std::uint16_t tag, const Writer& inner) {
    return str(tag, inner.fields());
}

std::string Writer::frame(std::uint16_t type, std::uint64_t req_id, std::uint16_t flags) {
    start();
    const std::size_t body = buf_.size() - header_size;
    // A peer would refuse it: whoever built it broke a limit it must keep.
    if (body > max_body)
        panic("record type " + std::to_string(type) + " of " + std::to_string(body) +
              " bytes exceeds the frame limit");
    set_be(buf_.data(), static_cast<std::uint32_t>(body));
    set_be(buf_.data() + 4, type);
    set_be(buf_.data() + 6, flags);
    set_be(buf_.data() + 8, req_id);
    std::string out = std::move(buf_);
    buf_.clear();  // moved from: empty in practice, now by definition
    return out;
}

std::optional<std::uint32_t> Field::as_u32() const {
    if (value.size() != 4) return std::nullopt;
    return get_u32(value.data());
}
std::optional<std::uint64_t> Field::as_u64() const {
    if (value.size() != 8) return std::nullopt;
    return get_u64(value.data());
}

FieldReader::Next FieldReader::next(Field& f) {
    if (at_ == bytes_.size()) return Next::end;
    if (bytes_.size() - at_ < 6) return Next::truncated;
    f.tag = get_u16(bytes_.data() + at_);
    const std::uint32_t len = get_u32(bytes_.data() + at_ + 2);
    at_ += 6;
    if (len > bytes_.size() - at_) return Next::truncated;
    f.value = bytes_.substr(at_, len);
    at_ += len;
    return Next::field;
}

std::optional<std::vector<Field>> parse_fields(std::string_view b) {
    std::vector<Field> out;
    FieldReader r(b);
    for (Field f;;) {
        switch (r.next(f)) {
        case FieldReader::Next::field: out.push_back(f); break;
        case FieldReader::Next::end: return out;
        case FieldReader::Next::truncated: return std::nullopt;
        }
    }
}

} // namespace smx::rec
