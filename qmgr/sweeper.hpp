// The orphan sweeper: content files that no transaction names (a crash
// between SMTPS's write and the IBDB commit, or before an unlink) go to
// quarantine/ (their senders never got a 250): at start-up and every
// queue.orphan_age / 2. It owns its timer and its count; it reads the active
// queue, asks DEFEDB on its strand and the reaper what was unlinked meanwhile.
#pragma once

#include "qmgr/coro.hpp"
#include "qmgr/defedb_strand.hpp"
#include "qmgr/queue.hpp"
#include "qmgr/reaper.hpp"

#include "libsm/config.hpp"
#include "libsm/content_trust.hpp"

#include <boost/asio.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

class OrphanSweeper {
public:
    OrphanSweeper(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
                  const ActiveQueue& queue, DefedbStrand& defedb, Reaper& reaper);

    void start();  // a sweep now, then one every orphan_age / 2
    void stop();   // the sweep under way finishes, no other starts
    bool idle() const { return tasks_.idle(); }
    std::uint64_t quarantined() const { return quarantined_; }

private:
    asio::awaitable<void> run();
    asio::awaitable<void> sweep();
    void quarantine(const std::vector<std::string>& ids);

    const smx::Config& cfg_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    const ActiveQueue& queue_;
    DefedbStrand& defedb_;
    Reaper& reaper_;
    std::string content_, quarantine_;  // Config::content_dir_abs(), quarantine_dir_abs()
    smx::content::Expect orphan_;         // what an orphan may be to be kept
    asio::steady_timer timer_;
    bool stopped_ = false;
    std::uint64_t quarantined_ = 0;
    Coroutines tasks_;
};

} // namespace smx::qmgr
