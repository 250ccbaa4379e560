// The bouncer: recipients that failed for good (5xx, or the end of the queue
// lifetime) are collected per transaction and reported to the sender in one
// RFC 3464 DSN, a new transaction from <> queued like any other mail; delay
// warnings (queue.delay_warning_time) likewise, once per recipient, and
// success notices for NOTIFY=SUCCESS mail relayed to a next hop without DSN.
// Each recipient's NOTIFY (RFC 3461) is honoured: NEVER gives none, a list
// without FAILURE no bounce, without DELAY no warning. It owns
// the reports gathered in this event-loop turn, the DSN files and the
// bounce counters; the failed recipients' state changes go through the
// active queue (bounce_begin here; bounced or bounce_failed in its owner's
// hooks, once the DSN is durable or could not be written).
#pragma once

#include "libsm/dsn_params.hpp"
#include "qmgr/coro.hpp"
#include "qmgr/delivery_log.hpp"
#include "qmgr/dsn.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/queue.hpp"
#include "qmgr/reaper.hpp"

#include "libsm/config.hpp"
#include "libsm/content_trust.hpp"

#include "libsm/clock.hpp"

#include <boost/asio.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

class Bouncer {
public:
    struct Bounce {
        std::uint32_t idx = 0;
        dsn::FailedRcpt why;
    };
    struct Hooks {
        // The report is durable (or none is sent): the recipients are final.
        std::function<void(const std::string& ta_id, const std::vector<Bounce>&)> bounced;
        // The DSN could not be queued: the recipients wait in DEFEDB.
        std::function<void(const std::string& ta_id, const std::vector<Bounce>&,
                           const std::string& error)>
            failed;
        // A DSN transaction, durable in IBDB, to be delivered.
        std::function<void(Ta& dsn)> schedule;
    };

    Bouncer(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
            ActiveQueue& queue, Ibdb& ibdb, Reaper& reaper, Hooks hooks,
            const smx::Clock& clock = smx::system_clock());

    // A recipient (active or in flight) failed for good.
    void bounce(Ta& ta, std::uint32_t idx, const Attempt& at, dsn::FailedRcpt why);
    // A recipient just deferred (moving): its sender hears once after
    // delay_warning_time.
    void warn_if_late(Ta& ta, std::uint32_t idx, const std::string& relay);
    // A recipient was just delivered (before it is marked sent): with
    // NOTIFY=SUCCESS and a next hop that did not take the NOTIFY on, its
    // sender gets an "Action: relayed" notice (RFC 3461 5.2.2.1).
    void relayed(Ta& ta, std::uint32_t idx, const std::string& relay, const smx::msg::Reply& reply,
                 bool peer_dsn);

    std::uint64_t bounced() const { return bounced_; }    // recipients: status=bounced
    std::uint64_t dsn_sent() const { return dsn_sent_; }  // DSNs queued
    bool idle() const { return tasks_.idle(); }

private:
    void report(std::map<std::string, std::vector<Bounce>>& to, Ta& ta, std::uint32_t idx,
                dsn::FailedRcpt why);
    asio::awaitable<void> flush();
    enum class Kind { failure, delay, success };
    // One DSN for the recipients in list, written, logged in IBDB and
    // scheduled; for a non-delivery report the hooks hear whether it is.
    asio::awaitable<void> queue_dsn(std::string id, std::shared_ptr<const smx::msg::TaCommit> env,
                                    std::vector<Bounce> list, Kind kind);
    // 0 or the errno of the write, and the DSN's size.
    asio::awaitable<std::pair<int, std::uint64_t>> write_dsn(
        std::shared_ptr<const smx::msg::TaCommit> env, const std::vector<Bounce>& list,
        const std::string& dsn_id, Kind kind);
    smx::msg::TaCommit dsn_commit(const std::string& dsn_id, const std::string& to,
                                 std::uint64_t size);
    // Why the sender of ta gets no DSN (null sender, bounce_untrusted), or
    // nullptr when it does.
    const char* no_dsn_reason(const Ta& ta) const;
    // The recipient's NOTIFY (the default without one).
    static smx::dsn::Notify notify(const Ta& ta, std::uint32_t idx);

    const smx::Config& cfg_;
    const smx::Clock& clock_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    ActiveQueue& queue_;
    Ibdb& ibdb_;
    Reaper& reaper_;
    Hooks hooks_;
    smx::content::Store store_;  // where content is read, and who wrote it
    bool sync_names_;  // smx::content::sync_names()
    // Recipients failed for good (or late), by transaction: one DSN each.
    std::map<std::string, std::vector<Bounce>> bounces_, delays_;
    std::uint64_t bounced_ = 0, dsn_sent_ = 0;
    Coroutines tasks_;
};

} // namespace smx::qmgr
