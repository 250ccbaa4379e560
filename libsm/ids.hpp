// Transaction ids and the clock.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace smx {

// A new transaction id: 17 upper-case hex digits (unix seconds, microseconds,
// and 16 bits of this process's stream and counter), unique across restarts
// and sortable by arrival.
std::string new_ta_id();

// The processes that make ids at the same time each take their own stream
// (0-31, the top 5 bits of the last four digits), so that two ids made in
// the same microsecond differ: SMTPS process i takes i, smx-pickup (local
// submission) and QMGR (DSNs) their own.
// Within a stream the counter (11 bits) would have to wrap within one
// microsecond to repeat. Call before any id is made; the default is 0.
inline constexpr unsigned id_streams = 32;
inline constexpr unsigned qmgr_id_stream = id_streams - 1;
inline constexpr unsigned pickup_id_stream = id_streams - 2;
void set_id_stream(unsigned stream);

// True for strings new_ta_id() could have made; checked at every boundary
// since ids become file names.
bool valid_ta_id(std::string_view id);
// When a valid id was made, in unix microseconds (what new_ta_id read).
std::uint64_t ta_id_time_us(std::string_view id);
// The stream a valid id was made in (set_id_stream).
unsigned ta_id_stream(std::string_view id);

std::uint64_t now_us();

// RFC 5322 date-time in UTC, in any locale: "Sun, 22 Nov 2026 19:00:22 +0000".
std::string rfc5322_date(std::uint64_t unix_us);

} // namespace smx
