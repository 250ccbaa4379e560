// Framed, typed records exchanged between smx processes over Unix sockets.
//
// Frame:  u32 length | u16 type | u16 flags | u64 request-id | fields...
//   length counts the bytes after the 16-byte header.
// Field:  u16 tag | u32 length | bytes   (all integers big-endian)
//   Tags below 0x8000 are mandatory: a reader that does not know one rejects
//   the record. Tags from 0x8000 up are optional and skipped when unknown, so
//   a newer peer can add hints without breaking an older one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::rec {

inline constexpr std::size_t header_size = 16;
// Largest frame body we accept: a full envelope of max recipients fits easily.
// Every writer builds its records within it (SMTPS bounds the envelope,
// SMTPC the reply texts); Writer::frame panics on a bug that does not.
inline constexpr std::uint32_t max_body = 4u << 20;
// A larger frame up to this size is skipped and handed to the reader as
// oversize, so that only that request fails; a length beyond it means the
// stream is out of step, and the link is dropped.
inline constexpr std::uint32_t max_skip = 64u << 20;
inline constexpr std::uint16_t optional_tag = 0x8000;

struct Header {
    std::uint32_t length = 0;
    std::uint16_t type = 0;
    std::uint16_t flags = 0;
    std::uint64_t req_id = 0;
};

// Parses a 16-byte header. Returns nullopt when length exceeds max_body.
std::optional<Header> parse_header(std::string_view bytes16);
// The same without the size check.
Header parse_header_unchecked(std::string_view bytes16);

// Builds one frame; fields are appended in order, after room for the
// header, so that frame() fills that in and hands the buffer over.
class Writer {
public:
    Writer();
    Writer& str(std::uint16_t tag, std::string_view v);
    Writer& u32(std::uint16_t tag, std::uint32_t v);
    Writer& u64(std::uint16_t tag, std::uint64_t v);
    // A nested TLV sequence (e.g. one recipient with its result).
    Writer& nested(std::uint16_t tag, const Writer& inner);
    std::string_view fields() const {
        return buf_.empty() ? std::string_view() : std::string_view(buf_).substr(header_size);
    }
    // Header + fields, ready for the wire; the writer is empty afterwards.
    std::string frame(std::uint16_t type, std::uint64_t req_id, std::uint16_t flags = 0);

private:
    void put_tag(std::uint16_t tag, std::size_t len);
    // Room for the header, unless there is: after frame() the writer holds
    // nothing (most writers go right after, and 16 bytes of header would be
    // a heap block).
    void start() {
        if (buf_.empty()) buf_.resize(header_size);
    }
    std::string buf_;
};

struct Field {
    std::uint16_t tag = 0;
    std::string_view value;
    std::optional<std::uint32_t> as_u32() const;
    std::optional<std::uint64_t> as_u64() const;
};

// Reads a TLV sequence field by field, strictly: a field running past the
// end is an error. The views point into `bytes`, which must outlive them.
class FieldReader {
public:
    explicit FieldReader(std::string_view bytes) : bytes_(bytes) {}
    enum class Next { field, end, truncated };
    Next next(Field& f);

private:
    std::string_view bytes_;
    std::size_t at_ = 0;
};

// The whole sequence at once (FieldReader); nullopt when truncated.
std::optional<std::vector<Field>> parse_fields(std::string_view bytes);

// One received frame: header plus its body bytes. An oversize frame (body
// over max_body) comes with its header only, so that the reader can refuse
// that one request (hdr.req_id) and go on.
struct Frame {
    Header hdr;
    std::string body;
    bool oversize = false;
};

std::string put_u16(std::uint16_t v);
std::string put_u32(std::uint32_t v);
std::string put_u64(std::uint64_t v);
std::uint16_t get_u16(const char* p);
std::uint32_t get_u32(const char* p);
std::uint64_t get_u64(const char* p);

} // namespace smx::rec
