// CRC32C (Castagnoli), the checksum of IBDB records and of content segment records.
#pragma once

#include <cstdint>
#include <string_view>

namespace smx {

// crc32c(data) over all of data; pass the previous result as crc to continue
// a running checksum over several pieces.
std::uint32_t crc32c(std::string_view data, std::uint32_t crc = 0);

} // namespace smx
