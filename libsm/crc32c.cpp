// CRC32C with the SSE4.2 crc32 instruction when the CPU has it (checked once
// at run time, so the binary still runs on any x86-64), else a byte table.
#include "libsm/crc32c.hpp"

#include <array>
#include <cstring>

namespace smx {
namespace {

constexpr std::uint32_t poly = 0x82F63B78u;  // reflected Castagnoli polynomial

constexpr std::array<std::uint32_t, 256> make_table() {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
        std::uint32_t c = i;
        for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        t[i] = c;
    }
    return t;
}

constexpr auto table = make_table();

std::uint32_t crc_table(const unsigned char* p, std::size_t n, std::uint32_t c) {
    while (n--) c = table[(c ^ *p++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
std::uint32_t crc_hw(const unsigned char* p, std::size_t n, std::uint32_t c) {
    std::uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        std::uint64_t w;
        std::memcpy(&w, p, 8);
        c64 = __builtin_ia32_crc32di(c64, w);
    }
    c = static_cast<std::uint32_t>(c64);
    for (; n > 0; --n) c = __builtin_ia32_crc32qi(c, *p++);
    return c;
}

const bool have_hw = __builtin_cpu_supports("sse4.2");
#endif

} // namespace

std::uint32_t crc32c(std::string_view data, std::uint32_t crc) {
    auto p = reinterpret_cast<const unsigned char*>(data.data());
    std::uint32_t c = ~crc;
#if defined(__x86_64__)
    if (have_hw) return ~crc_hw(p, data.size(), c);
#endif
    return ~crc_table(p, data.size(), c);
}

} // namespace smx
