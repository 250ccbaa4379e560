#include "libsm/session_counts.hpp"

#include "libsm/panic.hpp"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace smx {

int SessionCounts::create(std::string& err) {
    const int fd = ::memfd_create("smx-smtps-sessions", MFD_CLOEXEC);
    if (fd < 0) {
        err = std::string("memfd_create: ") + std::strerror(errno);
        return -1;
    }
    if (::ftruncate(fd, bytes) != 0) {
        err = std::string("ftruncate of the session counts: ") + std::strerror(errno);
        ::close(fd);
        return -1;
    }
    return fd;
}

SessionCounts::SessionCounts(int fd) {
    struct stat st{};
    if (::fstat(fd, &st) != 0 || static_cast<std::size_t>(st.st_size) != bytes)
        throw std::runtime_error("fd " + std::to_string(fd) + " is not the session counts (" +
                                 std::to_string(bytes) + " bytes)");
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        throw std::runtime_error(std::string("mmap of the session counts: ") + std::strerror(errno));
    slots_ = static_cast<Slot*>(p);
}

SessionCounts::~SessionCounts() { ::munmap(slots_, bytes); }

void SessionCounts::set(unsigned slot, std::uint64_t sessions) {
    if (slot >= max_smtps_processes) panic("session counts: slot out of range");
    slots_[slot].sessions.store(sessions, std::memory_order_relaxed);
}

std::uint64_t SessionCounts::others(unsigned slot) const {
    std::uint64_t n = 0;
    for (unsigned i = 0; i < max_smtps_processes; ++i)
        if (i != slot) n += slots_[i].sessions.load(std::memory_order_relaxed);
    return n;
}

} // namespace smx
