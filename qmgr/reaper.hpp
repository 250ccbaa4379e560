// The content reaper: the one place that decides a content file may
// go, and the only code that removes one (postfix's qmgr removes a queue
// file only from qmgr_message.c, once no recipient needs it).
//
// A file goes when no envelope names it any more: the transaction left
// memory with nothing open, and DEFEDB holds none of it (known at once when
// DEFEDB never saw it, else answered by a presence check on the DEFEDB
// strand). IBDB's ta_done is written first and the unlink follows once it
// is: a QMGR killed in between must not find an envelope without content.
// Unlinks are batched to the worker pool once per event-loop turn.
#pragma once

#include "qmgr/ibdb.hpp"
#include "qmgr/queue.hpp"

#include "libsm/config.hpp"

#include <boost/asio.hpp>
#include <string>
#include <unordered_set>
#include <vector>

namespace smx::qmgr {

namespace asio = boost::asio;

class Reaper {
public:
    enum class Verdict {
        keep,        // DEFEDB holds a recipient, or `smx delete` removes it itself
        now,         // nothing names it any more
        ask_defedb,  // DEFEDB held some of it: goes once DEFEDB says it holds none
    };

    Reaper(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers, Ibdb& ibdb);

    // For a transaction leaving memory with no open recipient.
    static Verdict verdict(const Ta& ta);
    // The content file that goes with ta: its own, or for a message in a
    // content segment its DEFEDB copy when DEFEDB touched it (any_copy: or
    // may be writing one now); empty when there is none (segments go by
    // the segment sweep, qmgr/segments.hpp).
    static std::string file_of(const Ta& ta, bool any_copy = false);

    // Every recipient is final: IBDB ta_done, then the unlink; logs "removed".
    void finish(const std::string& id, const std::string& content_id);
    // The same without the log line (`smx delete` logs its own).
    void drop(const std::string& id, const std::string& content_id);
    // Content that no envelope will ever name (its IBDB record was never
    // written): unlinked now. An empty id or a segment reference: nothing.
    void discard(const std::string& content_id);

    // The orphan sweep: a file unlinked while it runs is not an orphan,
    // whatever the sweep listed when it started.
    void sweep_begin();
    bool unlinked_during_sweep(const std::string& content_id) const;
    void sweep_end();

private:
    const smx::Config& cfg_;
    asio::any_io_executor ex_;
    asio::thread_pool& workers_;
    Ibdb& ibdb_;
    std::string content_;  // Config::content_dir_abs()
    std::vector<std::string> unlinks_;  // content ids for the next pool job
    bool sweeping_ = false;
    std::unordered_set<std::string> unlinked_in_sweep_;
};

} // namespace smx::qmgr
