#include "smtps/segment_writer.hpp"

#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"

#include <unistd.h>

namespace smx::smtps {

SegmentFile::SegmentFile(std::string content_dir, bool sync_name)
    : id_(smx::new_ta_id()), dir_(smx::content::segments_dir(content_dir)),
      path_(smx::content::segment_path(content_dir, id_)), sync_name_(sync_name) {}

SegmentFile::~SegmentFile() {
    if (fd_ >= 0) ::close(fd_);
}

int SegmentFile::fd() {
    std::call_once(made_, [this] {
        int fd = -1;
        int err = smx::content::create(path_, fd);
        if (!err && sync_name_) err = smx::content::sync_dir(dir_);
        if (err) {
            if (fd >= 0) {
                ::close(fd);
                ::unlink(path_.c_str());
            }
            fd_ = -err;
            failed_ = true;
            return;
        }
        fd_ = fd;
        made_fd_.store(fd, std::memory_order_release);
    });
    return fd_;
}

SegmentWriter::Place SegmentWriter::reserve(std::uint64_t bytes) {
    const auto now = std::chrono::steady_clock::now();
    if (!cur_ || cur_->failed() || used_ + bytes > smx::content::segment_max_size ||
        now - started_ >= append_for_) {
        cur_ = std::make_shared<SegmentFile>(content_, sync_name_);
        used_ = 0;
        started_ = now;
        retire_.expires_after(append_for_);  // cancels the previous segment's wait
        retire_.async_wait([this, file = std::weak_ptr<SegmentFile>(cur_)](
                               const boost::system::error_code& ec) {
            if (!ec && cur_ == file.lock()) cur_.reset();
        });
    }
    Place p{cur_, used_};
    used_ += bytes;
    return p;
}

} // namespace smx::smtps
