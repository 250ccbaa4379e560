#include "quarantine.hpp"

#include "content_file.hpp"

#include <atomic>
#include <cstring>

namespace smx::qmgr {
namespace {
std::atomic<std::uint64_t> failures{0};
} // namespace

std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes) {
    const std::string path = dir + "/" + name;
    const int err = sm::content::write_durable(path, bytes, 0600);  // QMGR's alone
    if (!err) return {};
    failures.fetch_add(1, std::memory_order_relaxed);
    return path + ": " + std::strerror(err);
}

std::uint64_t quarantine_write_failures() { return failures.load(std::memory_order_relaxed); }

} // namespace smx::qmgr
