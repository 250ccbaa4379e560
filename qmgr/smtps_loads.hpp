// What each SMTPS event loop last reported of its sessions and transactions
// (SMTPS_LOAD), kept per QMGR link while the link is up: `smx stats` and
// Prometheus show the sums and the sessions of each loop. The refusals and
// milter failures each report counts since the one before (smx-pickup's
// milter failures too) are added up for as long as QMGR runs.
#pragma once

#include "libsm/messages.hpp"
#include "libsm/panic.hpp"
#include "qmgr/histogram.hpp"

#include <cstdint>
#include <map>

namespace smx::qmgr {

class SmtpsLoads {
public:
    std::uint64_t add_link() {
        loads_.emplace(++next_link_, smx::msg::SmtpsLoad{});
        return next_link_;
    }
    void remove_link(std::uint64_t link) {
        if (loads_.erase(link) == 0) smx::panic("smtps loads: removing a link never added");
    }
    void update(std::uint64_t link, const smx::msg::SmtpsLoad& load) {
        const auto it = loads_.find(link);
        if (it == loads_.end()) smx::panic("smtps loads: a report from a link never added");
        add_counts(load);
        it->second = load;
        it->second.rejected.clear();
        it->second.milter_failures = {};
    }
    // A report's counts alone (smx-pickup's, which is no link).
    void add_counts(const smx::msg::SmtpsLoad& load) {
        for (const auto& e : load.rejected) rejected_.add(e);
        for (std::size_t a = 0; a < smx::msg::milter_actions; ++a)
            milter_failures_[a] += load.milter_failures[a];
    }

    std::uint64_t links() const { return loads_.size(); }
    const smx::RejectionCounts& rejected() const { return rejected_; }
    // By the failed milter's default action (MilterAction's order).
    const smx::msg::MilterFailureCounts& milter_failures() const { return milter_failures_; }
    // Summed over the links.
    smx::msg::SmtpsLoad total() const {
        smx::msg::SmtpsLoad t;
        for (const auto& [link, l] : loads_) {
            t.sessions += l.sessions;
            t.transactions += l.transactions;
            t.waiting += l.waiting;
        }
        return t;
    }
    // Sessions by loop index, in index order (links of one index summed).
    LabelCounts sessions_by_loop() const {
        std::map<std::uint32_t, std::uint64_t> by;
        for (const auto& [link, l] : loads_) by[l.loop] += l.sessions;
        LabelCounts out;
        for (const auto& [loop, n] : by) out.emplace_back(std::to_string(loop), n);
        return out;
    }

private:
    std::map<std::uint64_t, smx::msg::SmtpsLoad> loads_;
    smx::RejectionCounts rejected_;
    smx::msg::MilterFailureCounts milter_failures_ = {};
    std::uint64_t next_link_ = 0;
};

} // namespace smx::qmgr
