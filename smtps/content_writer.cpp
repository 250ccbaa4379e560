#include "smtps/content_writer.hpp"

#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"

#include <cerrno>
#include <cstdint>
#include <algorithm>
#include <filesystem>
#include <unistd.h>

namespace smx::smtps {

std::string ContentStore::path_for(std::string_view ta_id) const {
    return smx::content::file_path(content_, ta_id, hashed_);
}

bool ContentStore::has_room(std::uint64_t size) {
    recount_if_due();
    // A message that will not spill goes to a segment (when there are any),
    // and is copied out if it is deferred.
    return space_.has_room(size, segment_for_.count() > 0 && size < spill_size ? size : 0);
}

std::optional<smx::SpaceAccount::Claim> ContentStore::claim(std::uint64_t now, std::uint64_t copy) {
    recount_if_due();
    return space_.claim(now, copy);
}

ContentStore::~ContentStore() {
    const std::lock_guard lock(recount_->m);
    recount_->space = nullptr;
}

void ContentStore::recount_if_due() {
    if (!space_.recount_due()) return;
    asio::post(pool_, [r = recount_] {
        const std::lock_guard lock(r->m);
        if (r->space) r->space->recount_segments();
    });
}

std::size_t ContentStore::remove_stale_tmp() const {
    namespace fs = std::filesystem;
    std::size_t n = 0;
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(content_, ec);
         !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
        if (it.depth() > 1) it.disable_recursion_pending();
        const auto& p = it->path();
        if (p.extension() == ".tmp" && it->is_regular_file(ec) && fs::remove(p, ec)) ++n;
    }
    return n;
}

ContentWriter::ContentWriter(ContentStore& store, std::string_view ta_id,
                             std::shared_ptr<SegmentWriter> segment)
    : store_(store), segment_(std::move(segment)), ta_id_(ta_id), content_id_(ta_id) {
    buf_.reserve(4096);
}

ContentWriter::~ContentWriter() {
    if (fd_ >= 0) ::close(fd_);
    if (created_) ::unlink(path_.c_str());
}

void ContentWriter::append(std::string_view bytes) {
    size_ += bytes.size();
    if (err_) return;
    buf_.append(bytes);
    if (buf_.size() >= spill_size) spill();
}

// Made when a file is: a message that goes into a segment never needs it.
const std::string& ContentWriter::path() {
    if (path_.empty()) path_ = store_.path_for(ta_id_);
    return path_;
}

void ContentWriter::spill() {
    // Written now, on the loop: held only while it is written.
    const auto room = store_.claim(buf_.size(), 0);
    if (!room) return refuse();
    if (fd_ < 0) {
        if ((err_ = smx::content::create(path(), fd_)) != 0) return;
        created_ = true;
    }
    err_ = smx::content::write_all(fd_, buf_);
    buf_.clear();
}

// The rest of the message would cross the reserve: what was spilled goes
// now (the client gets 452 at its end of data), the rest is only counted.
void ContentWriter::refuse() {
    short_ = true;
    err_ = ENOSPC;
    buf_ = std::string();
    if (fd_ >= 0) {
        ::close(fd_);
        fd_ = -1;
    }
    if (created_) {
        ::unlink(path_.c_str());
        created_ = false;
    }
}

asio::awaitable<int> ContentWriter::commit() {
    if (err_) co_return err_;
    if (segment_ && fd_ < 0) co_return co_await commit_to_segment();
    // Held until the write is back: other sessions see it meanwhile.
    const auto room = store_.claim(buf_.size(), 0);
    if (!room) {
        refuse();
        co_return err_;
    }
    // The job owns copies of everything it touches (the session may be
    // destroyed, at shutdown, while the pool still runs it), and the file:
    // it removes it on an error.
    int fd = fd_;
    fd_ = -1;
    created_ = false;
    auto job = [fd, buf = std::move(buf_), path = path(), sync = store_.sync_each(),
                sync_name = store_.sync_names()]() mutable -> asio::awaitable<int> {
        int err = 0;
        if (fd < 0) err = smx::content::create(path, fd);
        if (!err) err = smx::content::write_all(fd, buf);
        // With sync (content_sync = "file") the data is durable before
        // TA_COMMIT; either way QMGR's group commit (its syncfs of this file
        // system, or the journal commit of its IBDB fdatasync, or with the
        // IBDB elsewhere our sync_name) makes data and directory entry
        // durable before any 250.
        co_return smx::content::close_created(fd, err, path, sync, sync_name);
    };
    err_ = co_await asio::co_spawn(store_.pool(), std::move(job), asio::use_awaitable);
    committed_ = err_ == 0;
    co_return err_;
}

// The place is taken here, on the loop; no write needs a lock: places never
// overlap. A record goes into a segment already made right here, on the
// loop: one pwritev into the page cache of a file that exists, cheaper than
// the hand-off to a pool thread and back (it cost about 7 futex calls and
// two thread switches per message). Making the file (a create can wait for
// a journal commit) and, with content_sync = "file", the fdatasync stay on
// the pool. Durable as a file is: QMGR's batch syncfs, or with
// content_sync = "file" that fdatasync (which makes the segment's other
// records durable too).
asio::awaitable<int> ContentWriter::commit_to_segment() {
    const std::uint64_t record = smx::content::segment_header_size + buf_.size();
    // The record, and the content file it is copied to if it is deferred.
    auto room = store_.claim(record, buf_.size());
    if (!room) {
        refuse();
        co_return err_;
    }
    auto place = segment_->reserve(record);
    const bool sync = store_.sync_each();
    if (const int fd = place.file->made_fd(); fd >= 0 && !sync) {
        err_ = smx::content::write_segment_record(fd, place.offset, ta_id_, buf_);
        buf_.clear();
    } else {
        auto job = [file = place.file, offset = place.offset, id = ta_id_, buf = std::move(buf_),
                    sync]() -> asio::awaitable<int> {
            const int fd = file->fd();
            if (fd < 0) co_return -fd;
            int err = smx::content::write_segment_record(fd, offset, id, buf);
            if (!err && sync && ::fdatasync(fd) != 0) err = errno;
            co_return err;
        };
        err_ = co_await asio::co_spawn(store_.pool(), std::move(job), asio::use_awaitable);
    }
    if (!err_) {
        room->written();
        content_id_ = smx::content::segment_ref(place.file->id(), place.offset);
    }
    co_return err_;
}

bool ContentSource::read_at(std::uint64_t offset, std::size_t n, std::string& out) const {
    out.clear();
    if (offset < spilled_) {
        out.resize(static_cast<std::size_t>(std::min<std::uint64_t>(n, spilled_ - offset)));
        const ssize_t got = ::pread(fd_, out.data(), out.size(), static_cast<off_t>(offset));
        if (got <= 0) {
            if (got == 0) errno = EIO;  // the file is shorter than was written
            out.clear();
            return false;
        }
        out.resize(static_cast<std::size_t>(got));
        return true;
    }
    const std::uint64_t at = offset - spilled_;
    if (at < tail_.size()) out.assign(tail_.substr(static_cast<std::size_t>(at), n));
    return true;
}

TakenContent::~TakenContent() {
    if (fd_ >= 0) ::close(fd_);
    if (!path_.empty()) ::unlink(path_.c_str());
}

TakenContent ContentWriter::take_content() {
    const std::uint64_t spilled = size_ - buf_.size();
    std::string tail = std::exchange(buf_, std::string());
    buf_.reserve(4096);
    size_ = 0;
    if (fd_ < 0) return TakenContent(-1, {}, spilled, std::move(tail));
    // The edited copy takes the name; the original keeps its descriptor.
    std::string tmp = path() + ".tmp";
    if (::rename(path_.c_str(), tmp.c_str()) != 0) {
        err_ = errno;
        tmp = path_;
    }
    created_ = false;
    return TakenContent(std::exchange(fd_, -1), std::move(tmp), spilled, std::move(tail));
}

void ContentWriter::remove_committed() {
    if (committed_) ::unlink(path_.c_str());
}

} // namespace smx::smtps
