#include "qmgr/segments.hpp"

#include "libsm/await.hpp"
#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"

#include <spdlog/spdlog.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <unordered_set>
#include <vector>

namespace smx::qmgr {

namespace {

std::uint64_t us(std::chrono::seconds s) {
    return static_cast<std::uint64_t>(std::chrono::microseconds(s).count());
}

} // namespace

Segments::Segments(const smx::Config& cfg, asio::any_io_executor ex, asio::thread_pool& workers,
                   const ActiveQueue& queue, Ibdb& ibdb)
    : cfg_(cfg), ex_(ex), workers_(workers), queue_(queue), ibdb_(ibdb),
      store_(smx::content::store_for(cfg)), fds_(store_), timer_(ex) {}

std::string Segments::check(const smx::content::SegmentRef& ref, const std::string& ta_id,
                            std::uint64_t size) {
    const std::uint64_t made = smx::ta_id_time_us(ref.segment), now = smx::now_us();
    if (made < cutoff_us_ || made + us(cfg_.queue.segment_age) < now)
        return "Content segment too old";
    if (made > now + us(cfg_.queue.segment_age)) return "Content segment from the future";
    smx::content::Body body;
    if (const int err = body.open(store_, smx::content::segment_ref(ref.segment, ref.offset), ta_id,
                                  size, &fds_))
        return "Content record: " + (err == ENOENT ? std::string(std::strerror(err)) : body.why());
    return {};
}

void Segments::start() { tasks_.spawn(ex_, run(), "segment sweep"); }

void Segments::stop() {
    stopped_ = true;
    timer_.cancel();
}

asio::awaitable<void> Segments::run() {
    while (!stopped_) {
        co_await sweep();
        if (stopped_) break;
        timer_.expires_after(cfg_.queue.segment_age / 3);
        auto [ec] = co_await timer_.async_wait(smx::await_tuple);
        if (ec) break;  // stop()
    }
}

asio::awaitable<void> Segments::sweep() {
    // The order matters: the cutoff first (from here on no TA_COMMIT names
    // an older segment), then what memory names, then the IBDB barrier.
    const std::uint64_t now = smx::now_us(), named_for = us(cfg_.queue.segment_age);
    cutoff_us_ = std::max(cutoff_us_, now > named_for ? now - named_for : 0);
    const std::uint64_t cutoff = cutoff_us_;
    fds_.close_before(cutoff);
    std::unordered_set<std::string> named;
    queue_.for_each([&](const Ta& ta) {
        if (auto ref = smx::content::parse_segment_ref(ta.content_id())) named.insert(ref->segment);
    });
    co_await asio::async_initiate<const asio::use_awaitable_t<>, void()>(
        [this](auto handler) {
            // Posted, never run inside after_completions() or the IBDB's
            // completion loop.
            auto h = std::make_shared<decltype(handler)>(std::move(handler));
            ibdb_.after_completions([h, ex = ex_] { asio::post(ex, [h] { std::move(*h)(); }); });
        },
        asio::use_awaitable);
    auto remove = [dir = smx::content::segments_dir(store_.dir), cutoff, named = std::move(named)] {
        namespace fs = std::filesystem;
        std::uint64_t n = 0;
        std::error_code ec;
        for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
             it.increment(ec)) {
            const std::string id = smx::content::segment_of_file_name(it->path().filename().string());
            if (id.empty() || smx::ta_id_time_us(id) >= cutoff || named.count(id)) continue;
            if (::unlink(it->path().c_str()) == 0) ++n;
            else if (errno != ENOENT)
                spdlog::error("segment {}: remove: {}", it->path().string(), std::strerror(errno));
        }
        if (ec && ec != std::errc::no_such_file_or_directory)
            spdlog::error("segments {}: {}", dir, ec.message());
        return n;
    };
    removed_ += co_await run_on(workers_.get_executor(), std::move(remove));
}

} // namespace smx::qmgr
