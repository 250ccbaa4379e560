// The IBDB's batches: the records waiting for their write, and when the
// front batch is cut (the commit policy, commit_policy.hpp). Transaction
// records join the back batch until it holds max_batch; completion records
// ride the front one, the next to be written, and need no sync of their own.
// A failed write's completion records come back to the front, in their
// order, after a back-off that doubles up to 5 s (a full disk).
#pragma once

#include "qmgr/commit_policy.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/ibdb_record.hpp"

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::qmgr::ibdb {

class Batcher {
public:
    using Clock = std::chrono::steady_clock;

    struct Batch {
        std::string tx, done;  // transaction and completion records
        std::size_t tx_records = 0, done_records = 0;
        std::vector<Ibdb::Durable> acks;
        std::vector<std::function<void()>> written;
        std::vector<std::string> ta_ids;
        Clock::time_point oldest{}, first_done{};
    };

    explicit Batcher(const IbdbOptions& opt);

    void add_transaction(const std::string& ta_id, std::string_view envelope, Ibdb::Durable ack);
    void add_completion(RecType type, std::string_view payload);
    // written runs once the completion records queued so far are written:
    // true when the front batch carries some (it runs with that write).
    bool after_front(std::function<void()>& written);
    // The completion records of a failed write, back in front: behind those
    // of failed writes before it in the same chain of failures, in order.
    void retry_completions(std::string_view records, std::size_t n, bool first_of_chain);
    // A write succeeded or failed: the back-off of completion records.
    void write_ok() { retry_delay_ = Clock::duration(0); }
    void write_failed();
    void committed(Clock::duration took) { policy_.committed(took); }

    // When the front batch goes: with no write out (out_started empty), or
    // behind the one write out, handed out at out_started, when `overlap`
    // allows it. nullopt: not before that write is back (or nothing to go).
    std::optional<Clock::time_point> due(Clock::time_point now,
                                         std::optional<Clock::time_point> out_started,
                                         bool overlap) const;
    bool empty() const { return queue_.empty(); }
    Batch take();
    std::size_t pending() const;

private:
    Batch& front();

    CommitPolicy policy_;
    unsigned max_batch_;
    std::chrono::milliseconds completion_delay_;
    std::deque<Batch> queue_;  // front = next write; only the back takes transactions
    std::size_t chain_done_at_ = 0;  // where a chain's retried completion records end
    // After a failed write (a full disk) the next one waits this long,
    // doubling up to 5 s, instead of retrying in a loop.
    Clock::duration retry_delay_{0};
};

} // namespace smx::qmgr::ibdb
