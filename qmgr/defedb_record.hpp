// DEFEDB on-disk format (see defedb.hpp): keys, the recipient and envelope
// records, and the key of the next-try index.
#pragma once

#include "qmgr/defedb.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

class Db;
class Dbt;

namespace smx::qmgr::defedb {

// Version 2 keeps the last reply structured (issue 9); version 1 records
// are still read.
inline constexpr std::uint8_t format_version = 2;

// ta-id | u32 BE idx: the recipients of a transaction are adjacent.
std::string rcpt_key(const std::string& ta_id, std::uint32_t idx);

std::string encode_rcpt(const DeferredRcpt& r);
// nullopt when the record is not one we wrote (version, lengths, ta-id).
// A version 1 record decodes too; encode_rcpt always writes the current one.
std::optional<DeferredRcpt> decode_rcpt(std::string_view key, std::string_view data);

// version u8 | smx::msg::envelope_bytes()
std::string encode_envelope(const smx::msg::TaCommit& ta);
std::optional<smx::msg::TaCommit> decode_envelope(std::string_view data);

// The Db::associate callback of the next-try index, and the time in its keys.
int index_key(Db*, const Dbt* pkey, const Dbt* pdata, Dbt* skey);
std::optional<std::uint64_t> index_time(std::string_view skey);

} // namespace smx::qmgr::defedb
