#include "qmgr/reaper.hpp"

#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {

Reaper::Reaper(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
               Ibdb& ibdb)
    : cfg_(cfg), ex_(std::move(ex)), workers_(workers), ibdb_(ibdb),
      content_(cfg.content_dir_abs()) {}

Reaper::Verdict Reaper::verdict(const Ta& ta) {
    const bool parked = std::any_of(ta.rcpts().begin(), ta.rcpts().end(), [](const Rcpt& r) {
        return r.state() == RcptState::deferred;
    });
    if (ta.deleted() || parked) return Verdict::keep;
    return ta.touched_defedb() ? Verdict::ask_defedb : Verdict::now;
}

std::string Reaper::file_of(const Ta& ta, bool any_copy) {
    if (!smx::content::parse_segment_ref(ta.content_id())) return ta.content_id();
    return any_copy || ta.touched_defedb() ? ta.id : std::string();
}

void Reaper::finish(const std::string& id, const std::string& content_id) {
    drop(id, content_id);
    spdlog::info("{}: removed", id);
}

void Reaper::drop(const std::string& id, const std::string& content_id) {
    if (sweeping_) unlinked_in_sweep_.insert(content_id);
    ibdb_.ta_done(id, [this, content_id] { discard(content_id); });
}

// Unlinks run on the worker pool: removing the files cost as much as the
// whole run in the sendmail X measurements.
void Reaper::discard(const std::string& content_id) {
    if (content_id.empty() || smx::content::parse_segment_ref(content_id)) return;
    if (sweeping_) unlinked_in_sweep_.insert(content_id);
    unlinks_.push_back(content_id);
    if (unlinks_.size() > 1) return;
    asio::post(ex_, [this] {
        asio::post(workers_, [content = content_, hashed = cfg_.queue.cdb_hashed,
                              ids = std::move(unlinks_)] {
            for (const auto& id : ids)
                if (const int err = smx::content::remove(content, id, hashed); err && err != ENOENT)
                    spdlog::error("{}: remove content file: {}", id, std::strerror(err));
        });
        unlinks_.clear();
    });
}

void Reaper::sweep_begin() {
    sweeping_ = true;
    unlinked_in_sweep_.clear();
}

bool Reaper::unlinked_during_sweep(const std::string& content_id) const {
    return unlinked_in_sweep_.count(content_id) > 0;
}

void Reaper::sweep_end() { sweeping_ = false; }

} // namespace smx::qmgr
