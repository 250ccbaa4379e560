// The DEFEDB record decoders: a recipient record (key | data, split by the
// first byte), the stored envelope and the index key. Oracle: a decoded
// current-version recipient re-encodes to the same bytes; an older one
// re-encodes to a current record that decodes to the same recipient.
#include "qmgr/defedb_record.hpp"

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::string_view in(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::size_t split = std::min<std::size_t>(data[0], in.size());
    const std::string_view key = in.substr(0, split), value = in.substr(split);
    namespace d = smx::qmgr::defedb;
    if (auto r = d::decode_rcpt(key, value)) {
        const std::string again = d::encode_rcpt(*r);
        if (value[0] == d::format_version ? again != value : d::decode_rcpt(key, again) != r)
            std::abort();
        if (d::rcpt_key(r->ta_id, r->idx) != key) std::abort();
    }
    (void)d::decode_envelope(in);
    (void)d::index_time(in);
    return 0;
}
