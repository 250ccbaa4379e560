// IBDB on-disk format and the start-up reader (see ibdb.hpp).
//
// Record: magic u32 | version u8 | type u8 | length u32 | crc32c u32 |
// payload, integers little-endian; the CRC covers type, length and payload.
// Payloads: transaction = smx::msg::envelope_bytes(); recipient done/deferred
// = u8 id length | ta-id | u32 index; transaction done = u8 id length | ta-id.
#pragma once

#include "qmgr/ibdb.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace smx::qmgr::ibdb {

inline constexpr std::uint32_t magic = 0x42444249;  // "IBDB" on disk
inline constexpr std::uint8_t version = 1;
inline constexpr std::size_t header_size = 14;

enum RecType : std::uint8_t {
    transaction = 1,
    rcpt_done = 2,
    rcpt_deferred = 3,
    ta_done = 4,
};

void append_record(std::string& out, RecType type, std::string_view payload);

// Payload of a completion record; idx is left out for ta_done.
std::string ref_payload(std::string_view ta_id, std::optional<std::uint32_t> idx);

struct Ref {
    std::string ta_id;
    std::uint32_t idx = 0;
};
std::optional<Ref> parse_ref(std::string_view payload, bool with_idx);

struct Record {
    RecType type{};
    std::string_view payload;
    std::size_t size = 0;  // header + payload
};

enum class Parse { ok, incomplete, bad };

// Checks the record at data[off]: incomplete when data ends inside it (a torn
// write), bad when the magic, version, type or CRC is wrong.
Parse parse_record(std::string_view data, std::size_t off, Record& r);

std::string file_name(std::uint32_t n);  // "00000003.log"
std::optional<std::uint32_t> file_number(std::string_view name);

struct LogContents {
    // Transactions still in the IBDB, in log order, with the file that holds
    // their transaction record.
    std::vector<std::pair<std::uint32_t, RecoveredTa>> tas;
    std::vector<std::uint32_t> files;  // every log file, ascending
    std::uint64_t corrupt = 0;         // records quarantined
};

// Reads and replays every file of opt.dir (see Ibdb::recover). Blocking.
LogContents read_log(const IbdbOptions& opt);

} // namespace smx::qmgr::ibdb
