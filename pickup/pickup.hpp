// smx-pickup's service: takes each ready maildrop file (MaildropDir) and
// commits its transaction to QMGR as SMTPS does, one at a time: TA_COMMIT,
// and only after TA_ACK ok the maildrop file goes. It lists the maildrop
// at start (first the p files an earlier run left mid-commit), then again
// whenever inotify says a file was renamed or moved into it, and once a
// minute in any case (a lost event, a retry). File work runs on a worker
// thread; the event loop only waits.
#pragma once

#include "pickup/maildrop_dir.hpp"

#include "libsm/channel.hpp"
#include "libsm/config.hpp"
#include "libsm/messages.hpp"
#include "libsm/rewrite.hpp"

#include <boost/asio.hpp>
#include <memory>

namespace smx::pickup {

namespace asio = boost::asio;

class Pickup {
public:
    Pickup(asio::io_context& io, MaildropDir& dir, std::shared_ptr<smx::Channel> qmgr,
           asio::thread_pool& pool, std::shared_ptr<const smx::Rewriter> rewrite,
           std::shared_ptr<const smx::MilterConfig> milters, std::string hostname);
    // [rewrite] after a reload: for the messages taken from now on.
    void set_rewriter(std::shared_ptr<const smx::Rewriter> r) { rewrite_ = std::move(r); }
    // [milter] after a reload: likewise.
    void set_milters(std::shared_ptr<const smx::MilterConfig> m) { milters_ = std::move(m); }

    // Watches the maildrop (before the first listing, so that nothing
    // renamed in between is missed); throws std::runtime_error when inotify
    // cannot.
    void watch();
    // Runs until stop() (0) or until QMGR does not answer a commit (75: the
    // MCP starts us again, and the commit is resumed).
    asio::awaitable<int> run();
    void stop();

private:
    asio::awaitable<void> read_events();
    // Does what o says; false when QMGR is lost.
    asio::awaitable<bool> handle(Outcome o);
    // The answer to act on for a message: QMGR's, or a refusal before it.
    struct Answer {
        smx::msg::TaAck ack;
        std::string by = "the queue manager";
        bool discard = false;  // a milter's DISCARD
    };
    // The envelope, the milters and TA_COMMIT; nullopt when no TA_ACK came.
    asio::awaitable<std::optional<Answer>> commit(Taken& t);
    // milter.non_smtpd_milters (pickup/local_milters.cpp): t shown to them as
    // postfix's cleanup shows local mail, their edits applied to ta and to
    // t's content file; the answer when they (or their edits) refuse it.
    asio::awaitable<std::optional<Answer>> milter(Taken& t, smx::msg::TaCommit& ta);
    // The envelope of t rewritten into ta (libsm/rewrite.hpp), as SMTPS
    // rewrites its own; the ack to act on when it cannot be (a table that
    // fails: tempfail; an envelope grown too large: reject).
    std::optional<smx::msg::TaAck> rewrite(const Taken& t, smx::msg::TaCommit& ta) const;

    asio::io_context& io_;
    MaildropDir& dir_;
    std::shared_ptr<smx::Channel> qmgr_;
    asio::thread_pool& pool_;
    std::shared_ptr<const smx::Rewriter> rewrite_;
    std::shared_ptr<const smx::MilterConfig> milters_;
    std::string hostname_;  // {j}, {daemon_name}
    asio::posix::stream_descriptor events_;
    asio::steady_timer wake_;
    std::uint64_t next_req_ = 0;
    bool changed_ = false;     // inotify saw a new file since the last listing
    bool retry_soon_ = false;  // a tempfail or a write error: list again in a few seconds
    bool stopping_ = false;
};

} // namespace smx::pickup
