// Content segments on QMGR's side (libsm/content_segment.hpp): the one
// owner of which segments a TA_COMMIT may name and of when a segment goes.
//
// A TA_COMMIT may name a record in a segment made less than [queue]
// segment_age ago (by the id in its name) and not before the last sweep's
// cutoff; the record must be there, whole, for that transaction and of the
// envelope's size. Every segment_age / 3 the sweep fixes a cutoff
// (segment_age ago: nothing older can be named from then on), notes
// the segments the transactions in memory name, waits until the IBDB has
// written every completion asked for so far (a crash cannot bring back a
// transaction that left memory), and removes the older segments no one
// named. DEFEDB never names a segment (a deferred message is copied out
// first), so memory is all that counts.
#pragma once

#include "qmgr/coro.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/queue.hpp"

#include "libsm/config.hpp"
#include "libsm/content_segment.hpp"

#include <boost/asio.hpp>
#include <cstdint>
#include <string>

namespace smx::qmgr {

namespace asio = boost::asio;

class Segments {
public:
    Segments(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
             const ActiveQueue& queue, Ibdb& ibdb);
    Segments(const Segments&) = delete;
    Segments& operator=(const Segments&) = delete;

    // At intake: empty when the TA_COMMIT may name ref for ta_id's size
    // bytes; else why not (a tempfail: the client may send it again).
    std::string check(const smx::content::SegmentRef& ref, const std::string& ta_id,
                      std::uint64_t size);

    void start();  // a sweep now (after recovery), then every segment_age / 3
    void stop();
    bool idle() const { return tasks_.idle(); }
    std::uint64_t removed() const { return removed_; }

private:
    asio::awaitable<void> run();
    asio::awaitable<void> sweep();

    const smx::Config& cfg_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    const ActiveQueue& queue_;
    Ibdb& ibdb_;
    smx::content::Store store_;  // where content is read, and who wrote it
    // Segments made before this are never named again (only rises).
    std::uint64_t cutoff_us_ = 0;
    // The segments intake read lately.
    smx::content::SegmentFds fds_;
    asio::steady_timer timer_;
    bool stopped_ = false;
    std::uint64_t removed_ = 0;
    Coroutines tasks_;
};

} // namespace smx::qmgr
