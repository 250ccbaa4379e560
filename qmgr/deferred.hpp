// The deferred queue: recipients that failed for now are written to DEFEDB
// in batches (one durable commit for many deferrals, one batch out at a
// time), and a timer on DEFEDB's next-try index hands them back when due,
// leased so that a later due() skips them while they are out. It owns the
// batches, the due timer and lease, the maintenance timer and the count of
// recipients in DEFEDB; recipient state stays with the active queue, which
// its owner (Qmgr) changes from the hooks.
#pragma once

#include "qmgr/coro.hpp"
#include "qmgr/defedb_strand.hpp"
#include "qmgr/queue.hpp"

#include "libsm/config.hpp"
#include "libsm/content_trust.hpp"

#include "libsm/clock.hpp"

#include <boost/asio.hpp>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

// The DEFEDB copy of a message kept in a content segment (written before
// DEFEDB names it): the content file named by its transaction id, there
// and of the envelope's size (written whole, then renamed).
// Ours alone (QMGR's account wrote it): SMTPS's may plant a file of its own
// under that name.
bool has_defedb_copy(const smx::content::Store& store, const smx::msg::TaCommit& env);

class DeferredQueue {
public:
    // A DEFEDB write waiting for the next batch.
    struct Park {
        std::shared_ptr<const smx::msg::TaCommit> env;
        DeferredRcpt rec;
        bool fresh = false;  // not in DEFEDB yet: put, then IBDB rcpt_deferred
    };
    // A transaction that left memory: does DEFEDB still hold some of it?
    struct Check {
        std::string ta_id, content_id;
    };
    struct Hooks {
        // These parks are durable in DEFEDB; DEFEDB holds nothing of `gone`.
        std::function<void(std::vector<Park> parks, std::vector<Check> gone)> written;
        // Due recipients, leased (transactions being deleted left out).
        std::function<void(std::vector<DeferredTa> tas)> due;
        // How many recipients the active queue can take now.
        std::function<std::size_t()> room;
    };

    // retry_after: how long a DEFEDB batch or due read that failed (e.g.
    // ENOSPC) waits before it is tried again; a unit test shortens it.
    DeferredQueue(const smx::Config& cfg, asio::any_io_executor ex, DefedbStrand& db, Hooks hooks,
                  const smx::Clock& clock = smx::system_clock(),
                  std::chrono::milliseconds retry_after = std::chrono::seconds(5));

    // Start-up: the due loop and the once-a-minute maintenance. After
    // stop() the batch out is answered, and idle() once every coroutine
    // has ended.
    void start();
    void stop();
    bool idle() const { return tasks_.idle(); }

    // Queued for the next batch.
    void park(const Ta& ta, std::uint32_t idx, std::uint64_t until_us);
    void remove(const std::string& ta_id, std::uint32_t idx);
    void check(const std::string& ta_id, const std::string& content_id);
    // `smx delete`: parks of ta_id not yet written are not written; returns
    // their recipient indexes.
    std::vector<std::uint32_t> cancel_parks(const std::string& ta_id);
    // `smx delete`: every DEFEDB recipient of ta_id goes; how many, or
    // nullopt on a DEFEDB error. A due() answer meanwhile skips ta_id.
    asio::awaitable<std::optional<std::size_t>> remove_ta(std::string ta_id);

    // Re-reads the index head (after a release); due_now: a flush.
    void refresh();
    void due_now();

    std::uint64_t count() const { return count_; }  // recipients in DEFEDB
    std::uint64_t quarantined() const { return quarantined_; }  // due without content

private:
    void kick();
    asio::awaitable<void> writer();
    void arm(std::uint64_t at_us);
    asio::awaitable<void> due_loop();
    asio::awaitable<void> fetch();
    asio::awaitable<void> maintenance();

    const smx::Config& cfg_;
    const smx::Clock& clock_;
    const std::chrono::milliseconds retry_after_;
    asio::any_io_executor ex_;
    DefedbStrand& db_;
    Hooks hooks_;
    smx::content::Store store_;  // where content is read, and who wrote it
    std::string quarantine_;    // Config::quarantine_dir_abs()
    // The next batch, and whether the writer coroutine runs.
    std::vector<Park> parks_;
    std::vector<std::pair<std::string, std::uint32_t>> removes_;
    std::vector<Check> checks_;
    bool writing_ = false;
    asio::steady_timer retry_timer_;
    std::set<std::string> deleting_;
    // The due loop waits on due_timer_ until due_at_ (0: until armed), or
    // re-reads the index head first when refresh_ is set.
    asio::system_timer due_timer_;
    std::uint64_t due_at_ = 0;
    bool refresh_ = false;
    asio::steady_timer maint_timer_;
    bool running_ = true;
    std::uint64_t count_ = 0;
    std::uint64_t quarantined_ = 0;
    Coroutines tasks_;
};

} // namespace smx::qmgr
