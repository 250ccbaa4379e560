#include "smtpc/body.hpp"

#include <cerrno>
#include <cstring>

namespace smx::smtpc {

std::string MessageFile::open(const smx::content::Store& store, std::string_view content_id,
                              std::string_view ta_id, std::uint64_t size,
                              smx::content::SegmentFds* segments) {
    unusable_ = false;
    const int err = body_.open(store, content_id, ta_id, size, segments);
    if (!err) return {};
    if (err == ENOENT) return "queue file missing";
    if (!smx::content::valid_content_id(content_id)) return "bad queue file id";  // not echoed: any bytes
    unusable_ = err == EBADMSG || err == ELOOP;
    return "queue file " + std::string(content_id) + ": " + body_.why();
}

} // namespace smx::smtpc
