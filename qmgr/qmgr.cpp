#include "qmgr.hpp"

#include "ids.hpp"

#include <spdlog/spdlog.h>

namespace smx::qmgr {

namespace {
SchedulerOptions scheduler_options(const sm::Config& cfg) {
    SchedulerOptions o;
    o.initial_concurrency = cfg.client.initial_concurrency;
    o.max_concurrency = cfg.client.max_concurrency;
    // A dead destination is retried when its first deferred mail would be.
    o.dead_time = cfg.queue.retry_min;
    return o;
}
} // namespace

Qmgr::Qmgr(const sm::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
           Ibdb& ibdb)
    : cfg_(cfg), ex_(ex), workers_(workers), ibdb_(ibdb), spool_(cfg.spool_dir_abs()),
      router_(cfg),
      sched_(ex, scheduler_options(cfg),
             [this](Ta& ta, std::uint32_t idx, const std::string& why, std::uint64_t until) {
                 defer(ta, idx, {}, why, until);
             }),
      retry_timer_(ex), disk_timer_(ex) {
    check_disk();
}

void Qmgr::schedule(Ta& ta, const std::vector<std::uint32_t>& idx) {
    // Usually every recipient has the same destination; a linear search over
    // the few groups beats a map here.
    std::vector<std::pair<Destination, std::vector<std::uint32_t>>> groups;
    Destination d;
    for (auto i : idx) {
        const std::string domain = domain_of(ta.rcpts[i].addr);
        if (!router_.route(domain, d)) {
            retry_later(ta, i, {}, "no route to " + (domain.empty() ? ta.rcpts[i].addr : domain));
            continue;
        }
        auto g = std::find_if(groups.begin(), groups.end(),
                              [&](const auto& x) { return x.first.key == d.key; });
        if (g == groups.end()) {
            groups.emplace_back(d, std::vector<std::uint32_t>{i});
        } else {
            g->second.push_back(i);
        }
    }
    for (auto& [dest, list] : groups) sched_.submit(ta, dest, std::move(list));
    arm_retry();
}

} // namespace smx::qmgr
