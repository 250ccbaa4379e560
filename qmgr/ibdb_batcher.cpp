#include "qmgr/ibdb_batcher.hpp"

#include <algorithm>

namespace smx::qmgr::ibdb {

Batcher::Batcher(const IbdbOptions& opt)
    : policy_(opt.commit_policy, opt.commit_interval), max_batch_(std::max(1u, opt.max_batch)),
      completion_delay_(opt.completion_delay) {}

Batcher::Batch& Batcher::front() {
    if (queue_.empty()) queue_.emplace_back();
    return queue_.front();
}

void Batcher::add_transaction(const std::string& ta_id, std::string_view envelope,
                              Ibdb::Durable ack) {
    if (queue_.empty() || queue_.back().acks.size() >= max_batch_) queue_.emplace_back();
    Batch& b = queue_.back();
    const auto now = Clock::now();
    if (b.acks.empty()) b.oldest = now;
    policy_.arrived(now);
    append_record(b.tx, transaction, envelope);
    ++b.tx_records;
    b.acks.push_back(std::move(ack));
    b.ta_ids.push_back(ta_id);
}

void Batcher::add_completion(RecType type, std::string_view payload) {
    Batch& b = front();  // rides along with the next write
    if (b.done.empty()) b.first_done = Clock::now();
    append_record(b.done, type, payload);
    ++b.done_records;
}

bool Batcher::after_front(std::function<void()>& written) {
    if (queue_.empty() || queue_.front().done_records == 0) return false;
    queue_.front().written.push_back(std::move(written));
    return true;
}

void Batcher::write_failed() {
    retry_delay_ = std::clamp<Clock::duration>(2 * retry_delay_, completion_delay_,
                                               std::chrono::seconds(5));
}

void Batcher::retry_completions(std::string_view records, std::size_t n, bool first_of_chain) {
    if (first_of_chain) chain_done_at_ = 0;
    Batch& b = front();
    b.first_done = Clock::now() + retry_delay_ - completion_delay_;
    b.done.insert(chain_done_at_, records);
    chain_done_at_ += records.size();
    b.done_records += n;
}

std::optional<Batcher::Clock::time_point> Batcher::due(
    Clock::time_point now, std::optional<Clock::time_point> out_started, bool overlap) const {
    if (queue_.empty()) return std::nullopt;
    const Batch& b = queue_.front();
    if (b.acks.empty()) {
        // Completion records alone: after completion_delay (a lot of them
        // at once), and never beside a write out.
        if (out_started) return std::nullopt;
        return b.done.size() >= (1u << 20) ? now : b.first_done + completion_delay_;
    }
    const auto alone = b.acks.size() >= max_batch_ ? now : policy_.due(b.oldest);
    if (!out_started) return alone;
    if (!overlap) return std::nullopt;
    return policy_.due_behind(alone, *out_started);
}

Batcher::Batch Batcher::take() {
    Batch b = std::move(queue_.front());
    queue_.pop_front();
    return b;
}

std::size_t Batcher::pending() const {
    std::size_t n = 0;
    for (const auto& b : queue_) n += b.tx_records + b.done_records;
    return n;
}

} // namespace smx::qmgr::ibdb
