#include "libsm/content_segment.hpp"

#include "libsm/content_file.hpp"
#include "libsm/crc32c.hpp"
#include "libsm/ids.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace smx::content {

namespace {

constexpr std::string_view magic = "SMXSEG1\n";
constexpr std::size_t max_offset_digits = 12;  // 256 TiB: far beyond segment_max_size

void put_le(char* p, std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

std::uint64_t get_le(const char* p, int n) {
    std::uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
    return v;
}

int pread_all(int fd, char* buf, std::size_t n, std::uint64_t offset, std::size_t& got) {
    got = 0;
    while (got < n) {
        const ssize_t r = ::pread(fd, buf + got, n - got, static_cast<off_t>(offset + got));
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return errno;
        if (r == 0) break;
        got += static_cast<std::size_t>(r);
    }
    return 0;
}

} // namespace

std::string segment_ref(std::string_view segment, std::uint64_t offset) {
    char hex[24];
    std::snprintf(hex, sizeof hex, "+%llX", static_cast<unsigned long long>(offset));
    return std::string(segment) + hex;
}

std::optional<SegmentRef> parse_segment_ref(std::string_view content_id) {
    const auto plus = content_id.find('+');
    if (plus == std::string_view::npos) return std::nullopt;
    const auto seg = content_id.substr(0, plus), off = content_id.substr(plus + 1);
    if (!valid_ta_id(seg) || off.empty() || off.size() > max_offset_digits) return std::nullopt;
    if (off.size() > 1 && off[0] == '0') return std::nullopt;  // one spelling per offset
    SegmentRef r{std::string(seg), 0};
    for (char c : off) {
        int d;
        if (c >= '0' && c <= '9') d = c - '0';
        else if (c >= 'A' && c <= 'F') d = c - 'A' + 10;
        else return std::nullopt;
        r.offset = r.offset * 16 + static_cast<std::uint64_t>(d);
    }
    return r;
}

bool valid_content_id(std::string_view content_id) {
    return valid_ta_id(content_id) || parse_segment_ref(content_id).has_value();
}

std::string segments_dir(const std::string& content_dir) { return content_dir + "/segments"; }

std::string segment_path(const std::string& content_dir, std::string_view segment) {
    return segments_dir(content_dir) + "/" + std::string(segment) + ".seg";
}

std::string segment_of_file_name(std::string_view name) {
    if (!name.ends_with(".seg")) return {};
    name.remove_suffix(4);
    return valid_ta_id(name) ? std::string(name) : std::string();
}

int write_segment_record(int fd, std::uint64_t offset, std::string_view ta_id,
                         std::string_view data) {
    if (!valid_ta_id(ta_id)) return EINVAL;
    char h[segment_header_size] = {};
    std::memcpy(h, magic.data(), magic.size());
    put_le(h + 8, data.size(), 8);
    put_le(h + 16, crc32c(data), 4);
    std::memcpy(h + 23, ta_id.data(), ta_id.size());
    iovec iov[2] = {{h, sizeof h}, {const_cast<char*>(data.data()), data.size()}};
    std::size_t done = 0;
    const std::size_t total = sizeof h + data.size();
    while (done < total) {
        // Skip what went out already (a short write).
        iovec v[2];
        int n = 0;
        std::size_t skip = done;
        for (const auto& x : iov) {
            if (skip >= x.iov_len) {
                skip -= x.iov_len;
                continue;
            }
            v[n++] = {static_cast<char*>(x.iov_base) + skip, x.iov_len - skip};
            skip = 0;
        }
        const ssize_t w = ::pwritev(fd, v, n, static_cast<off_t>(offset + done));
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return errno;
        if (w == 0) return EIO;
        done += static_cast<std::size_t>(w);
    }
    return 0;
}

namespace {

// A record's header as read back.
struct SegmentRecord {
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    std::string ta_id;
};

// The header at h (segment_header_size bytes): 0, or EBADMSG.
int parse_segment_header(const char* h, SegmentRecord& rec) {
    if (std::string_view(h, magic.size()) != magic) return EBADMSG;
    rec.size = get_le(h + 8, 8);
    rec.crc = static_cast<std::uint32_t>(get_le(h + 16, 4));
    rec.ta_id.assign(h + 23, 17);
    return valid_ta_id(rec.ta_id) ? 0 : EBADMSG;
}

// A segment opened for reading and checked: 0 with fd, or an errno value and why.
int open_segment(const Store& store, std::string_view segment, int& fd, std::string& why) {
    std::uint64_t size = 0;
    return open_checked(segment_path(store.dir, segment), segment_file(store.writers), fd, size,
                        why);
}

// A running CRC32C of `size` bytes at offset of fd, read a piece at a time:
// what a record claims is never allocated whole.
int crc_of(int fd, std::uint64_t offset, std::uint64_t size, std::uint32_t& crc) {
    static constexpr std::size_t piece = 64 * 1024;
    std::string buf(static_cast<std::size_t>(std::min<std::uint64_t>(size, piece)), '\0');
    crc = 0;
    for (std::uint64_t done = 0; done < size;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(piece, size - done));
        std::size_t got = 0;
        if (const int err = pread_all(fd, buf.data(), n, offset + done, got)) return err;
        if (got != n) return EBADMSG;  // the file ends inside the record
        crc = crc32c(std::string_view(buf.data(), n), crc);
        done += n;
    }
    return 0;
}

bool record_within(std::uint64_t offset, std::uint64_t size, std::uint64_t file_size) {
    const std::uint64_t data_at = offset + segment_header_size;
    return size <= file_size && data_at <= file_size - size;
}

} // namespace

Expect segment_file(const Writers& w) { return Expect{w.smtps, w.smtps, segment_max_size, false}; }

OpenFile::~OpenFile() {
    if (fd_ >= 0) ::close(fd_);
}

std::shared_ptr<const OpenFile> SegmentFds::get(const std::string& segment, int& err,
                                                std::string& why) {
    err = 0;
    if (auto it = open_.find(segment); it != open_.end()) return it->second;
    int fd = -1;
    if ((err = open_segment(store_, segment, fd, why))) return nullptr;
    auto file = std::make_shared<const OpenFile>(fd);
    if (open_.size() >= max_open_) open_.erase(open_.begin());
    open_.emplace(segment, file);
    return file;
}

void SegmentFds::close_before(std::uint64_t cutoff_us) {
    while (!open_.empty() && ta_id_time_us(open_.begin()->first) < cutoff_us)
        open_.erase(open_.begin());
}

int Body::refuse(int err, std::string why) {
    file_.reset();
    head_ = {};
    start_ = size_ = 0;
    why_ = std::move(why);
    return err;
}

int Body::open(const Store& store, std::string_view content_id, std::string_view ta_id,
               std::uint64_t size, SegmentFds* segments, bool verify) {
    refuse(0, {});
    const auto ref = parse_segment_ref(content_id);
    int fd = -1;
    std::string why;
    if (!ref) {
        std::uint64_t got = 0;
        if (const int err = open_read(store.dir, content_id, store.hashed,
                                      message_file(store.writers, size), fd, got, why))
            return refuse(err, std::move(why));
        file_ = std::make_shared<const OpenFile>(fd);
        size_ = got;
        return 0;
    }
    if (size > segment_record_max) return refuse(EBADMSG, "larger than a segment record can be");
    if (segments) {
        int err = 0;
        file_ = segments->get(ref->segment, err, why);
        if (!file_) return refuse(err, std::move(why));
    } else {
        if (const int err = open_segment(store, ref->segment, fd, why))
            return refuse(err, std::move(why));
        file_ = std::make_shared<const OpenFile>(fd);
    }
    return open_record(file_->fd(), ref->offset, ta_id, size, verify);
}

// The header and the first data in one pread: a small message is then read
// whole, and what came back shows it whole, with no fstat.
int Body::open_record(int fd, std::uint64_t offset, std::string_view ta_id, std::uint64_t size,
                      bool verify) {
    read_.resize(segment_header_size + static_cast<std::size_t>(std::min<std::uint64_t>(
                                           std::max<std::uint64_t>(size, 1), prefetch)));
    std::size_t got = 0;
    if (const int err = pread_all(fd, read_.data(), read_.size(), offset, got))
        return refuse(err, std::strerror(err));
    if (got < segment_header_size) return refuse(EBADMSG, "no record header at its offset");
    SegmentRecord rec;
    if (parse_segment_header(read_.data(), rec) != 0)
        return refuse(EBADMSG, "no record header at its offset");
    if (rec.ta_id != ta_id) return refuse(EBADMSG, "the record of another transaction");
    // The header's size is believed only where it is the envelope's.
    if (rec.size != size)
        return refuse(EBADMSG, "a record of " + std::to_string(rec.size) + " bytes, " +
                                   std::to_string(size) + " expected");
    const std::size_t data_got = got - segment_header_size;
    if (data_got < rec.size) {
        struct stat st;
        if (::fstat(fd, &st) != 0) return refuse(errno, std::strerror(errno));
        if (!record_within(offset, rec.size, static_cast<std::uint64_t>(st.st_size)))
            return refuse(EBADMSG, "the segment ends inside the record");
    }
    head_ = std::string_view(read_).substr(
        segment_header_size, static_cast<std::size_t>(std::min<std::uint64_t>(data_got, rec.size)));
    start_ = offset + segment_header_size;
    size_ = rec.size;
    if (verify) {
        std::uint32_t crc = 0;
        if (const int err = crc_of(fd, start_, size_, crc))
            return refuse(err, err == EBADMSG ? "the segment ends inside the record"
                                              : std::strerror(err));
        if (crc != rec.crc) return refuse(EBADMSG, "the record's data does not match its CRC");
    }
    return 0;
}

int Body::read_at(std::uint64_t offset, std::size_t max, std::string& buf) const {
    if (offset >= size_) {
        buf.clear();
        return 0;
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(max, size_ - offset));
    if (offset + n <= head_.size()) {
        buf.assign(head_.data() + offset, n);
        return 0;
    }
    buf.resize(n);
    std::size_t got = 0;
    const int err = pread_all(file_->fd(), buf.data(), n, start_ + offset, got);
    buf.resize(got);
    return err;
}

} // namespace smx::content
