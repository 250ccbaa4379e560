#include "libsm/table_follow.hpp"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <optional>

namespace smx::table {
namespace {

// What tells one file at a path from another, or the same one rewritten.
struct Identity {
    dev_t dev;
    ino_t ino;
    off_t size;
    std::int64_t mtime_ns;
    bool operator==(const Identity&) const = default;
};

// nullopt: nothing there (or nothing we may look at): when it comes back,
// it is a change.
std::optional<Identity> identity_of(const std::string& path) {
    struct stat st{};
    // lstat: a link put in the file's place is a change, which open refuses.
    if (::lstat(path.c_str(), &st) != 0) return std::nullopt;
    return Identity{st.st_dev, st.st_ino, st.st_size,
                    std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec};
}

std::int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

constexpr std::int64_t interval_ns =
    std::chrono::duration_cast<std::chrono::nanoseconds>(follow_interval).count();

class FollowingTable final : public Table {
public:
    FollowingTable(const std::string& spec, std::string path,
                   std::function<std::shared_ptr<const Table>()> open)
        : Table(spec), path_(std::move(path)), open_(std::move(open)) {
        // Before the open: a change between the two is seen at the next check.
        seen_ = identity_of(path_);
        current_.store(open_());
        pattern_ = current_.load()->pattern();
    }

    // The type's, which a new file does not change.
    bool pattern() const override { return pattern_; }

    Lookup find(std::string_view key) const override {
        check();
        const auto t = current_.load();
        if (!t) return {Status::failed, {}};
        return t->find(key);
    }

    void each(const std::function<void(std::string_view, std::string_view)>& f) const override {
        const auto t = current_.load();
        if (!t) throw TableError(spec() + ": " + path_ + " could not be opened again after it changed");
        t->each(f);
    }

private:
    // The one lookup a second that wins the exchange looks at the file; the
    // others go on with the table they have.
    void check() const {
        const std::int64_t now = now_ns();
        std::int64_t due = next_check_.load(std::memory_order_relaxed);
        if (now < due || !next_check_.compare_exchange_strong(due, now + interval_ns,
                                                              std::memory_order_relaxed))
            return;
        const std::unique_lock lock(checking_, std::try_to_lock);
        if (!lock) return;  // a check slower than the interval is still running
        const auto id = identity_of(path_);
        if (id == seen_) return;
        seen_ = id;
        try {
            current_.store(open_());
            spdlog::info("table {}: {} changed; opened the new one", spec(), path_);
        } catch (const TableError& e) {
            // Logged once per change of the file, not once per lookup.
            current_.store(nullptr);
            spdlog::error("table {}: {} changed and cannot be opened: {}; its lookups fail "
                          "(temporary failure) until it can",
                          spec(), path_, e.what());
        }
    }

    const std::string path_;
    const std::function<std::shared_ptr<const Table>()> open_;
    bool pattern_ = false;
    mutable std::atomic<std::shared_ptr<const Table>> current_;
    mutable std::atomic<std::int64_t> next_check_{now_ns() + interval_ns};
    mutable std::mutex checking_;                // held by the lookup that checks
    mutable std::optional<Identity> seen_;       // under checking_
};

} // namespace

std::shared_ptr<const Table> follow(const std::string& spec, const std::string& path,
                                    std::function<std::shared_ptr<const Table>()> open) {
    return std::make_shared<FollowingTable>(spec, path, std::move(open));
}

} // namespace smx::table
