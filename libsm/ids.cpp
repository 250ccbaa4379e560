#include "libsm/config.hpp"
#include "libsm/ids.hpp"
#include "libsm/panic.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

namespace smx {

// SMTPS process i takes stream i: none may reach the streams of others.
static_assert(max_smtps_processes <= pickup_id_stream);

std::string rfc5322_date(std::uint64_t unix_us) {
    static constexpr const char* days[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
    static constexpr const char* months[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                             "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    std::time_t t = static_cast<std::time_t>(unix_us / 1000000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d +0000", days[tm.tm_wday],
                  tm.tm_mday, months[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return buf;
}

std::uint64_t now_us() {
    using namespace std::chrono;
    return static_cast<std::uint64_t>(
        duration_cast<microseconds>(system_clock::now().time_since_epoch()).count());
}

namespace {
std::atomic<unsigned> id_stream_bits{0};
}

void set_id_stream(unsigned stream) {
    if (stream >= id_streams) panic("id stream " + std::to_string(stream) + " out of range");
    id_stream_bits.store(stream << 11, std::memory_order_relaxed);
}

std::string new_ta_id() {
    static std::atomic<std::uint32_t> counter{0};
    const std::uint64_t us = now_us();
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08llX%05llX%04X",
                  static_cast<unsigned long long>((us / 1000000) & 0xffffffffu),
                  static_cast<unsigned long long>(us % 1000000),
                  id_stream_bits.load(std::memory_order_relaxed) |
                      static_cast<unsigned>(counter.fetch_add(1) & 0x7ff));
    return buf;
}

bool valid_ta_id(std::string_view id) {
    if (id.size() != 17) return false;
    for (char c : id)
        if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'F'))) return false;
    return true;
}

namespace {
std::uint64_t hex(std::string_view s) {
    std::uint64_t v = 0;
    for (char c : s) v = v * 16 + static_cast<std::uint64_t>(c <= '9' ? c - '0' : c - 'A' + 10);
    return v;
}
} // namespace

std::uint64_t ta_id_time_us(std::string_view id) {
    return hex(id.substr(0, 8)) * 1000000 + hex(id.substr(8, 5));
}

unsigned ta_id_stream(std::string_view id) { return static_cast<unsigned>(hex(id.substr(13, 4)) >> 11); }

} // namespace smx
