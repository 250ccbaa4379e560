#include "qmgr/scheduler.hpp"

#include "libsm/ids.hpp"

#include <algorithm>
#include <spdlog/spdlog.h>

namespace smx::qmgr {
namespace {

// Our own reason, not a server's reply (code 0), keeping the status class of
// the failure that made the destination dead.
smx::msg::Reply suspended(const smx::msg::Reply& why) {
    return {0, why.enhanced, "delivery temporarily suspended: " + smx::msg::to_string(why)};
}

// A job refused at connection level goes back to its queue this often before
// its recipients are deferred: once absorbs a server's "too many
// connections" while its other sessions succeed, and cannot become a loop.
constexpr unsigned max_connection_retries = 1;

} // namespace

Scheduler::Scheduler(asio::any_io_executor ex, ActiveQueue& queue, SchedulerOptions opt,
                     Suspend suspend, const smx::Clock& clock)
    : ex_(std::move(ex)), queue_(queue), opt_(opt), clock_(clock), suspend_(std::move(suspend)),
      pace_timer_(ex_),
      // Unique across restarts too, so a late RESULT can never match.
      next_da_(smx::now_us()) {
    opt_.initial_concurrency = std::max(1u, opt_.initial_concurrency);
    opt_.max_concurrency = std::max(opt_.initial_concurrency, opt_.max_concurrency);
    opt_.max_rcpts_per_delivery = std::max(1u, opt_.max_rcpts_per_delivery);
    set_rate(opt_.rate_limit, opt_.rate_interval);
}

void Scheduler::set_rate(unsigned limit, std::chrono::microseconds interval) {
    opt_.rate_limit = limit;
    opt_.rate_interval = interval;
    const auto us = static_cast<std::uint64_t>(std::max<std::int64_t>(1, interval.count()));
    spacing_us_ = limit ? std::max<std::uint64_t>(1, us / limit) : 0;
    if (limit) return;
    // No limit any more: what waited for its turn may go now.
    for (auto& [key, d] : dests_) d->next_send_us = 0;
    release_paced();
}

void Scheduler::stop() {
    pace_timer_.cancel();
}

void Scheduler::submit(Ta& ta, const Destination& dest, std::vector<std::uint32_t> idx) {
    if (idx.empty()) return;
    auto& slot = dests_[dest.key];
    if (!slot) {
        slot = std::make_unique<Dest>();
        slot->key = dest.key;
        slot->window = opt_.initial_concurrency;
    }
    Dest& d = *slot;
    d.nexthops = dest.nexthops;
    const std::uint64_t now = clock_.now_us();
    revive_if_due(d, now);
    if (d.dead_until_us) {
        for (auto i : idx)
            suspend_(ta, i, suspended(d.last_error), d.dead_until_us);
        return;
    }
    const std::size_t per = opt_.max_rcpts_per_delivery;
    if (idx.size() <= per) {
        d.jobs.push_back(Job{&ta, std::move(idx)});
        ++ta.sched.n_;
    } else {
        for (std::size_t i = 0; i < idx.size(); i += per) {
            auto end = idx.begin() + static_cast<std::ptrdiff_t>(std::min(idx.size(), i + per));
            d.jobs.push_back(Job{&ta, {idx.begin() + static_cast<std::ptrdiff_t>(i), end}});
            ++ta.sched.n_;
        }
    }
    make_ready(d);
}

std::uint64_t Scheduler::add_link(Send send) {
    links_.push_back(Link{next_link_, std::move(send), 0});
    kick();
    return next_link_++;
}

void Scheduler::remove_link(std::uint64_t link) {
    std::erase_if(links_, [&](const Link& l) { return l.id == link; });
    // Rare (SMTPC died), so a walk over the in-flight table is fine here.
    for (auto it = inflight_.begin(); it != inflight_.end();) {
        if (it->second.link != link) {
            ++it;
            continue;
        }
        Dest& d = *it->second.dest;
        for (auto i : it->second.job.idx) queue_.requeue(*it->second.job.ta, i);
        ++it->second.job.ta->sched.n_;
        d.jobs.push_front(std::move(it->second.job));
        --d.active;
        make_ready(d);
        it = inflight_.erase(it);
    }
}

void Scheduler::forget(const Ta& ta) {
    if (!ta.sched.any()) return;
    for (auto& [key, d] : dests_)
        std::erase_if(d->jobs, [&](const Job& j) { return j.ta == &ta; });
}

std::optional<Job> Scheduler::complete(std::uint64_t link, std::uint64_t da_id,
                                       bool connection_failed, const smx::msg::Reply& error,
                                       bool retry) {
    auto it = inflight_.find(da_id);
    if (it == inflight_.end() || it->second.link != link) return std::nullopt;
    Delivery dl = std::move(it->second);
    inflight_.erase(it);
    if (Link* l = find_link(link)) --l->inflight;
    Dest& d = *dl.dest;
    --d.active;
    delivery_seconds_.observe(seconds_since(dl.sent_us, clock_.now_us()));
    if (connection_failed) {
        on_failure(d, error);
        if (retry) retry_now(d, dl.job);
    } else {
        d.failed_cohorts = 0;
        d.window = std::min<double>(opt_.max_concurrency, d.window + 1.0 / d.window);
    }
    make_ready(d);
    collect(d);
    kick();
    dl.job.sent_us = dl.sent_us;
    return std::move(dl.job);
}

std::vector<std::pair<std::uint64_t, std::uint64_t>> Scheduler::overdue(
    std::uint64_t now_us, std::uint64_t max_us) const {
    std::vector<std::pair<std::uint64_t, std::uint64_t>> out;
    for (const auto& [da_id, dl] : inflight_)
        if (now_us - dl.sent_us > max_us) out.emplace_back(dl.link, da_id);
    return out;
}

double Scheduler::window(const std::string& key) const {
    auto it = dests_.find(key);
    return it == dests_.end() ? 0 : it->second->window;
}

bool Scheduler::dead(const std::string& key) const {
    auto it = dests_.find(key);
    return it != dests_.end() && it->second->dead_until_us != 0;
}

std::size_t Scheduler::dead_destinations() const {
    const std::uint64_t now = clock_.now_us();
    return static_cast<std::size_t>(std::count_if(
        dests_.begin(), dests_.end(), [&](const auto& kv) { return kv.second->dead_until_us > now; }));
}

bool Scheduler::can_send(const Dest& d) const {
    return !d.jobs.empty() && !d.dead_until_us && d.active < static_cast<unsigned>(d.window);
}

void Scheduler::make_ready(Dest& d) {
    if (d.ready || d.paced || !can_send(d)) return;
    d.ready = true;
    ready_.push_back(&d);
    kick();
}

// Many events (a commit batch, a burst of RESULTs) are folded into one pump,
// so their DELIVERs leave in one write.
void Scheduler::kick() {
    if (pump_posted_) return;
    pump_posted_ = true;
    asio::post(ex_, [this] {
        pump_posted_ = false;
        pump();
    });
}

void Scheduler::pump() {
    const std::uint64_t now = clock_.now_us();
    while (!ready_.empty()) {
        Link* l = pick_link();
        if (!l) return;  // the ready list waits for a link or a completion
        Dest* d = ready_.front();
        ready_.pop_front();
        d->ready = false;
        if (!can_send(*d)) {
            collect(*d);
            continue;
        }
        if (d->next_send_us > now) {
            pace(*d);
            continue;
        }
        dispatch(*d, *l, now);
        make_ready(*d);
    }
}

void Scheduler::dispatch(Dest& d, Link& l, std::uint64_t now) {
    Job job = std::move(d.jobs.front());
    d.jobs.pop_front();
    --job.ta->sched.n_;
    // Recipients held, deleted or suspended while the job waited are gone.
    std::erase_if(job.idx,
                  [&](std::uint32_t i) { return job.ta->rcpt(i).state() != RcptState::active; });
    if (job.idx.empty()) return;
    if (spacing_us_) {
        // From the previous slot while it is less than a spacing ago, so a
        // late timer does not lower the rate; else from now.
        const std::uint64_t base = now - d.next_send_us < spacing_us_ ? d.next_send_us : now;
        d.next_send_us = base + spacing_us_;
    }
    const Ta& ta = *job.ta;
    smx::msg::Deliver m;
    m.da_id = next_da_++;
    m.ta_id = ta.id;
    m.content_id = ta.content_id();
    m.sender = ta.sender();
    m.size = ta.size();
    m.params = ta.env->params;
    m.rcpts.reserve(job.idx.size());
    for (auto i : job.idx) {
        queue_.dispatch(*job.ta, i);
        m.rcpts.push_back(smx::msg::DeliverRcpt{i, ta.rcpt(i).addr(), ta.env->rcpts[i].params});
    }
    m.nexthops = *d.nexthops;
    l.send(smx::msg::encode(m));
    ++l.inflight;
    ++d.active;
    inflight_.emplace(m.da_id, Delivery{std::move(job), &d, l.id, now});
}

// Postfix's feedback: each failure costs one unit of concurrency and 1/window
// of a failed cohort; a whole cohort without a success marks the destination
// dead, and what waits for it is deferred instead of tried one by one.
void Scheduler::on_failure(Dest& d, const smx::msg::Reply& error) {
    d.last_error = error;
    d.failed_cohorts += 1.0 / d.window;
    d.window = std::max(1.0, d.window - 1.0);
    if (d.failed_cohorts < 1.0 || d.dead_until_us) return;
    d.dead_until_us = clock_.now_us() + static_cast<std::uint64_t>(opt_.dead_time.count());
    spdlog::warn("destination {} suspended until {} ({}s): {}", d.key,
                 smx::rfc5322_date(d.dead_until_us),
                 std::chrono::duration_cast<std::chrono::seconds>(opt_.dead_time).count(),
                 smx::msg::to_string(error));
    std::deque<Job> jobs = std::move(d.jobs);
    d.jobs.clear();
    for (auto& j : jobs) {
        --j.ta->sched.n_;
        for (auto i : j.idx)
            suspend_(*j.ta, i, suspended(error), d.dead_until_us);
    }
}

// The recipients of a delivery refused at connection level go back to the
// front of the queue, within the (now smaller) window, while the destination
// is live: a server refusing sessions above its limit costs a retry, not a
// deferral. Only once per job; held or deleted ones stay for the RESULT.
void Scheduler::retry_now(Dest& d, const Job& job) {
    if (d.dead_until_us || job.retries >= max_connection_retries || job.ta->deleted()) return;
    Job again{job.ta, {}, job.retries + 1};
    for (auto i : job.idx) {
        const Rcpt& r = job.ta->rcpt(i);
        if (r.state() != RcptState::inflight || r.hold()) continue;
        queue_.requeue(*job.ta, i);
        again.idx.push_back(i);
    }
    if (again.idx.empty()) return;
    ++again.ta->sched.n_;
    d.jobs.push_front(std::move(again));
}

void Scheduler::revive_if_due(Dest& d, std::uint64_t now) {
    if (!d.dead_until_us || now < d.dead_until_us) return;
    d.dead_until_us = 0;
    d.failed_cohorts = 0;
    d.window = opt_.initial_concurrency;
    spdlog::info("destination {} resumed", d.key);
}

// Waits for the destination's next slot under the rate limit.
void Scheduler::pace(Dest& d) {
    d.paced = true;
    paced_.push_back(&d);
    const std::uint64_t at = d.next_send_us;
    if (pace_armed_us_ && pace_armed_us_ <= at) return;
    pace_armed_us_ = at;
    const std::uint64_t now = clock_.now_us();
    pace_timer_.expires_after(std::chrono::microseconds(at > now ? at - now : 0));
    pace_timer_.async_wait([this](boost::system::error_code ec) {
        if (ec) return;  // re-armed earlier, or stopped
        pace_armed_us_ = 0;
        release_paced();
    });
}

// Paced destinations whose slot has come go back to the ready list (or are
// forgotten when idle); the timer is armed for the earliest of the rest.
void Scheduler::release_paced() {
    const std::uint64_t now = clock_.now_us();
    std::vector<Dest*> due;
    std::erase_if(paced_, [&](Dest* d) {
        if (d->next_send_us > now) return false;
        d->paced = false;
        due.push_back(d);
        return true;
    });
    std::vector<Dest*> later = std::move(paced_);
    paced_.clear();
    for (Dest* d : later) {
        d->paced = false;
        pace(*d);
    }
    for (Dest* d : due) {
        make_ready(*d);
        collect(*d);
    }
}

// An idle, live destination is forgotten (as postfix does), so queues for
// one-off domains do not accumulate.
void Scheduler::collect(Dest& d) {
    if (d.ready || d.paced || d.active || !d.jobs.empty() || d.dead_until_us) return;
    // Under a rate limit it is kept until its next slot, so new mail cannot
    // jump the spacing.
    if (d.next_send_us > clock_.now_us()) {
        pace(d);
        return;
    }
    const std::string key = d.key;  // d dies in the erase
    dests_.erase(key);
}

Scheduler::Link* Scheduler::pick_link() {
    Link* best = nullptr;
    for (auto& l : links_)
        if (l.inflight < opt_.link_max_inflight && (!best || l.inflight < best->inflight))
            best = &l;
    return best;
}

Scheduler::Link* Scheduler::find_link(std::uint64_t id) {
    for (auto& l : links_)
        if (l.id == id) return &l;
    return nullptr;
}

LabelCounts Scheduler::recipients_by_destination(std::size_t n) const {
    std::unordered_map<const Dest*, std::uint64_t> count;
    for (const auto& [key, d] : dests_)
        for (const Job& j : d->jobs) count[d.get()] += j.idx.size();
    for (const auto& [id, dl] : inflight_) count[dl.dest] += dl.job.idx.size();
    LabelCounts out;
    for (const auto& [d, c] : count)
        if (c) out.emplace_back(d->key, c);
    keep_largest(out, n);
    return out;
}

} // namespace smx::qmgr
