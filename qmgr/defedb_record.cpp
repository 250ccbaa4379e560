#include "qmgr/defedb_record.hpp"

#include "libsm/ids.hpp"

#include <db_cxx.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace smx::qmgr::defedb {
namespace {

// Recipient record, version 2: version u8 | flags u8 | next_try u64 BE |
// attempts u32 BE | first_arrival u64 BE | last_attempt u64 BE | reply code
// u32 BE | addr | enhanced status | reply text | relay (each u32 BE length,
// bytes). Version 1 had last_error (one text, "451 4.3.0 text") after addr
// and no code, status or relay. flags and next_try sit at fixed offsets in
// both so the index callback reads them without decoding the rest.
constexpr std::size_t off_flags = 1, off_next = 2, fixed_v1 = 30, fixed_size = 34;
constexpr unsigned char flag_held = 1, flag_warned = 2;
constexpr std::uint8_t version_1 = 1;

bool known_version(unsigned char v) { return v == version_1 || v == format_version; }

// A version 1 last_error split as it was formatted: "code status text",
// the code and status each only when present.
smx::msg::Reply reply_of_v1(std::string_view s) {
    smx::msg::Reply r;
    auto digits = [](std::string_view w) {
        return !w.empty() && std::all_of(w.begin(), w.end(), [](unsigned char c) { return std::isdigit(c); });
    };
    auto word = [&s] { return s.substr(0, s.find(' ')); };
    auto drop = [&s](std::size_t n) { s.remove_prefix(std::min(s.size(), n + 1)); };
    if (auto w = word(); w.size() == 3 && digits(w)) {
        r.code = static_cast<std::uint32_t>(std::stoul(std::string(w)));
        drop(3);
    }
    // An enhanced status is class.subject.detail, all digits (RFC 3463).
    auto status = [&](std::string_view w) {
        const auto a = w.find('.'), b = w.find('.', a + 1);
        return a == 1 && b != std::string_view::npos && (w[0] == '2' || w[0] == '4' || w[0] == '5') &&
               digits(w.substr(2, b - 2)) && digits(w.substr(b + 1));
    };
    if (auto w = word(); status(w)) {
        r.enhanced = std::string(w);
        drop(w.size());
    }
    r.text = std::string(s);
    return r;
}

void put_be(std::string& s, std::uint64_t v, int bytes) {
    for (int i = bytes - 1; i >= 0; --i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
std::uint64_t get_be(const unsigned char* p, int bytes) {
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v = (v << 8) | p[i];
    return v;
}
const unsigned char* uc(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

} // namespace

std::string rcpt_key(const std::string& ta_id, std::uint32_t idx) {
    std::string k = ta_id;
    put_be(k, idx, 4);
    return k;
}

std::string encode_rcpt(const DeferredRcpt& r) {
    std::string s;
    s.push_back(static_cast<char>(format_version));
    s.push_back(static_cast<char>((r.held ? flag_held : 0) | (r.warned ? flag_warned : 0)));
    put_be(s, r.next_try_us, 8);
    put_be(s, r.attempts, 4);
    put_be(s, r.first_arrival_us, 8);
    put_be(s, r.last_attempt_us, 8);
    put_be(s, r.last_reply.code, 4);
    for (const std::string* f : {&r.addr, &r.last_reply.enhanced, &r.last_reply.text, &r.last_relay}) {
        put_be(s, f->size(), 4);
        s += *f;
    }
    return s;
}

std::optional<DeferredRcpt> decode_rcpt(std::string_view key, std::string_view d) {
    if (key.size() < 5 || d.size() < fixed_v1 || !known_version(uc(d)[0]) ||
        (uc(d)[off_flags] & ~(flag_held | flag_warned)) != 0)
        return std::nullopt;
    const bool v1 = uc(d)[0] == version_1;
    if (!v1 && d.size() < fixed_size) return std::nullopt;
    DeferredRcpt r;
    r.ta_id.assign(key.substr(0, key.size() - 4));
    r.idx = static_cast<std::uint32_t>(get_be(uc(key) + key.size() - 4, 4));
    r.held = (uc(d)[off_flags] & flag_held) != 0;
    r.warned = (uc(d)[off_flags] & flag_warned) != 0;
    r.next_try_us = get_be(uc(d) + off_next, 8);
    r.attempts = static_cast<std::uint32_t>(get_be(uc(d) + 10, 4));
    r.first_arrival_us = get_be(uc(d) + 14, 8);
    r.last_attempt_us = get_be(uc(d) + 22, 8);
    std::size_t off = v1 ? fixed_v1 : fixed_size;
    if (!v1) r.last_reply.code = static_cast<std::uint32_t>(get_be(uc(d) + 30, 4));
    std::string last_error;
    std::vector<std::string*> fields{&r.addr, &last_error};
    if (!v1) fields = {&r.addr, &r.last_reply.enhanced, &r.last_reply.text, &r.last_relay};
    for (std::string* f : fields) {
        if (d.size() - off < 4) return std::nullopt;
        std::uint64_t n = get_be(uc(d) + off, 4);
        off += 4;
        if (d.size() - off < n) return std::nullopt;
        f->assign(d.substr(off, n));
        off += n;
    }
    if (off != d.size() || !smx::valid_ta_id(r.ta_id)) return std::nullopt;
    if (v1) r.last_reply = reply_of_v1(last_error);
    return r;
}

std::string encode_envelope(const smx::msg::TaCommit& ta) {
    std::string s(1, static_cast<char>(format_version));
    return s + smx::msg::envelope_bytes(ta);
}

std::optional<smx::msg::TaCommit> decode_envelope(std::string_view d) {
    // The envelope's bytes did not change with version 2.
    if (d.empty() || !known_version(uc(d)[0])) return std::nullopt;
    std::string err;
    return smx::msg::envelope_from_bytes(d.substr(1), err);
}

std::optional<std::uint64_t> index_time(std::string_view skey) {
    if (skey.size() < 8) return std::nullopt;
    return get_be(uc(skey), 8);
}

// Secondary key: next_try u64 BE | primary key. Held recipients (and records
// too short to be ours) are left out of the index.
int index_key(Db*, const Dbt* pkey, const Dbt* pdata, Dbt* skey) {
    const auto* d = static_cast<const unsigned char*>(pdata->get_data());
    if (pdata->get_size() < fixed_v1 || !known_version(d[0]) ||
        (d[off_flags] & flag_held) != 0)
        return DB_DONOTINDEX;
    std::size_t n = 8 + pkey->get_size();
    auto* m = static_cast<unsigned char*>(std::malloc(n));
    if (!m) return ENOMEM;
    std::memcpy(m, d + off_next, 8);
    std::memcpy(m + 8, pkey->get_data(), pkey->get_size());
    skey->set_data(m);
    skey->set_size(static_cast<u_int32_t>(n));
    skey->set_flags(DB_DBT_APPMALLOC);
    return 0;
}

} // namespace smx::qmgr::defedb
