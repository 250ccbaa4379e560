#include "libsm/maildrop_file.hpp"

#include "libsm/address.hpp"
#include "libsm/ids.hpp"
#include "libsm/messages.hpp"
#include "libsm/record.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace smx::maildrop {
namespace {

enum Tag : std::uint16_t {
    tag_uid = 1,
    tag_arrival = 2,
    tag_sender = 3,
    tag_rcpt = 4,
    tag_content_size = 5,
};

bool ascii(std::string_view s) {
    for (char c : s)
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    return true;
}

bool hex_tail(std::string_view s) {
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

} // namespace

std::size_t max_fields() { return msg::max_envelope; }

std::string encode(const Envelope& e, Kind kind) {
    rec::Writer w;
    if (kind == Kind::file) w.u32(tag_uid, e.uid).u64(tag_arrival, e.arrival_us);
    w.str(tag_sender, e.sender);
    for (const auto& r : e.rcpts) w.str(tag_rcpt, r);
    w.u64(tag_content_size, e.content_size);
    std::string out(magic);
    out += rec::put_u32(static_cast<std::uint32_t>(w.fields().size()));
    out += w.fields();
    return out;
}

std::optional<std::uint32_t> fields_length(std::string_view prefix, std::string& err) {
    if (prefix.size() < prefix_size || prefix.substr(0, magic.size()) != magic) {
        err = prefix.substr(0, 7) == magic.substr(0, 7) ? "unknown format version"
                                                         : "not a maildrop file";
        return std::nullopt;
    }
    const std::uint32_t n = rec::get_u32(prefix.data() + magic.size());
    if (n > max_fields()) {
        err = "envelope of " + std::to_string(n) + " bytes, over the limit of " +
              std::to_string(max_fields());
        return std::nullopt;
    }
    return n;
}

std::optional<Envelope> decode(std::string_view fields, Kind kind, std::string& err) {
    err.clear();
    Envelope e;
    bool uid = false, arrival = false, sender = false, size = false;
    rec::FieldReader r(fields);
    rec::Field f;
    // A field that may come once: false (err set) when it came before.
    auto once = [&](bool& seen, const char* what) {
        if (seen) err = std::string("duplicate ") + what;
        seen = true;
        return err.empty();
    };
    auto number = [&](bool& seen, const char* what, auto value, auto& out) {
        if (!once(seen, what)) return;
        if (!value) err = std::string("bad ") + what;
        else out = *value;
    };
    auto address = [&](std::string_view a, bool null_ok, const char* what) {
        if (!ascii(a) || !valid_address(a, null_ok)) err = std::string("invalid ") + what + " address";
        return std::string(a);
    };
    for (;;) {
        const auto next = r.next(f);
        if (next == rec::FieldReader::Next::end) break;
        if (next == rec::FieldReader::Next::truncated) {
            err = "truncated field";
            return std::nullopt;
        }
        switch (f.tag) {
        case tag_uid: number(uid, "uid", f.as_u32(), e.uid); break;
        case tag_arrival: number(arrival, "time", f.as_u64(), e.arrival_us); break;
        case tag_content_size: number(size, "content size", f.as_u64(), e.content_size); break;
        case tag_sender:
            if (once(sender, "sender")) e.sender = address(f.value, true, "sender");
            break;
        case tag_rcpt: e.rcpts.push_back(address(f.value, false, "recipient")); break;
        default: err = "unknown field " + std::to_string(f.tag);
        }
        if (!err.empty()) return std::nullopt;
    }
    const bool file = kind == Kind::file;
    if (uid != file || arrival != file)
        err = file ? "no uid or time" : "a uid or time in a submission";
    else if (!sender) err = "no sender";
    else if (e.rcpts.empty()) err = "no recipients";
    else if (!size) err = "no content size";
    if (!err.empty()) return std::nullopt;
    return e;
}

void ContentCheck::feed(std::string_view b) {
    for (char c : b) {
        if (c == '\n') {
            if (!after_cr_) bare_ = true;
        } else if (after_cr_) {
            bare_ = true;
        }
        if (static_cast<unsigned char>(c) >= 0x80) eight_bit_ = true;
        ends_crlf_ = after_cr_ && c == '\n';
        after_cr_ = c == '\r';
    }
}

std::string ContentCheck::finish() const {
    if (bare_ || after_cr_) return "a bare CR or LF in the content";
    if (!ends_crlf_) return "content that does not end in CRLF";
    return {};
}

bool valid_name(std::string_view name) {
    if (name.empty()) return false;
    const std::string_view rest = name.substr(1);
    switch (name.front()) {
    case writing_prefix:
    case ready_prefix: return rest.size() == 32 && hex_tail(rest);
    case committing_prefix: return valid_ta_id(rest);
    default: return false;
    }
}

std::string random_part() {
    unsigned char b[16];
    for (std::size_t got = 0; got < sizeof b;) {
        const ssize_t n = ::getrandom(b + got, sizeof b - got, 0);
        if (n < 0 && errno != EINTR)
            throw std::runtime_error(std::string("getrandom: ") + std::strerror(errno));
        if (n > 0) got += static_cast<std::size_t>(n);
    }
    static const char hex[] = "0123456789abcdef";
    std::string out;
    for (unsigned char c : b) {
        out += hex[c >> 4];
        out += hex[c & 15];
    }
    return out;
}

} // namespace smx::maildrop
