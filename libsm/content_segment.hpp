// Content segments: small messages appended to a shared file instead of a
// file each (creating and unlinking a file per message cost more CPU than
// the rest of the relay, docs/design.md). The one owner of the segment
// format, of the references that name a message in one, and of reading a
// message's body wherever it is kept (a content file or a segment record).
//
// A segment is <content_dir>/segments/<id>.seg, id a new_ta_id() (so its
// name says when it was made). A message in it is a record: a header of
// segment_header_size bytes (magic, data size, CRC32C of the data, the
// transaction id) and the data. Its reference, the envelope's content_id, is
// "<segment id>+<offset of the record, hex>". QMGR refuses a TA_COMMIT
// naming a segment made longer than [queue] segment_age ago (30 s), and
// removes a segment once it is that old and no transaction in memory names
// it; one SMTPS event loop appends to a segment for a sixth of that. So a
// segment never outlives its messages by much, and DEFEDB never names one:
// a deferred message is copied to a content file of its own first.
#pragma once

#include "libsm/content_trust.hpp"

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace smx::content {

inline constexpr std::size_t segment_header_size = 40;
// Where a segment ends: the writer starts a new one at this size, or after
// segment_age / 6.
inline constexpr std::uint64_t segment_max_size = 16 * 1024 * 1024;

struct SegmentRef {
    std::string segment;  // a valid_ta_id
    std::uint64_t offset = 0;
};

// The reference for the record at offset of segment; and back, strictly
// (nullopt for anything segment_ref could not have made).
std::string segment_ref(std::string_view segment, std::uint64_t offset);
std::optional<SegmentRef> parse_segment_ref(std::string_view content_id);
// A content file's id (valid_ta_id) or a segment reference.
bool valid_content_id(std::string_view content_id);

std::string segments_dir(const std::string& content_dir);
std::string segment_path(const std::string& content_dir, std::string_view segment);
// The segment id of a segment file name ("<id>.seg"), or empty.
std::string segment_of_file_name(std::string_view name);

// Writes the record of ta_id's data at offset of fd (one pwritev, retried
// while short). Returns 0 or an errno value.
int write_segment_record(int fd, std::uint64_t offset, std::string_view ta_id,
                         std::string_view data);

// The most data a record can hold: a segment is never larger than
// segment_max_size.
inline constexpr std::uint64_t segment_record_max = segment_max_size - segment_header_size;

// A segment as its readers expect it (open_checked): made by SMTPS, no
// larger than segment_max_size.
Expect segment_file(const Writers& w);

// An open descriptor, closed when the last holder lets go.
class OpenFile {
public:
    explicit OpenFile(int fd) : fd_(fd) {}
    ~OpenFile();
    OpenFile(const OpenFile&) = delete;
    OpenFile& operator=(const OpenFile&) = delete;
    int fd() const { return fd_; }

private:
    int fd_;
};

// Segments kept open, by id, for a process that reads many records from a
// few segments (QMGR's intake, SMTPC): one open(2) per segment and not per
// message (an open and a close were a fifth of SMTPC's system calls). At
// most max_open; the oldest go first. A segment removed meanwhile stays
// readable through a descriptor still held, so a reader keeps its own
// reference while it reads (Body does).
class SegmentFds {
public:
    explicit SegmentFds(Store store, std::size_t max_open = 32)
        : store_(std::move(store)), max_open_(max_open) {}
    // The open segment, checked (segment_file) when it was opened; null with
    // err set (an errno value) and why when it cannot be opened.
    std::shared_ptr<const OpenFile> get(const std::string& segment, int& err, std::string& why);
    // Lets go of the segments made before cutoff_us (ta_id_time_us).
    void close_before(std::uint64_t cutoff_us);
    std::size_t open_count() const { return open_.size(); }

private:
    Store store_;
    std::size_t max_open_;
    // By id, so oldest first: an id starts with the time it was made.
    std::map<std::string, std::shared_ptr<const OpenFile>, std::less<>> open_;
};

// A message's body, open for reading by offset (pread, so that a retry on
// another connection starts again from the beginning).
class Body {
public:
    Body() = default;
    Body(const Body&) = delete;
    Body& operator=(const Body&) = delete;

    // Opens the body content_id names in store, the content of transaction
    // ta_id, of exactly `size` bytes (the envelope's): a content file
    // checked as message_file, or a segment record whose segment is checked
    // as segment_file and whose header is whole, for ta_id and of that size.
    // With verify the record's data must also match its CRC (read in
    // bounded pieces). A segment comes from `segments` when given (its open
    // descriptor shared). 0, or ENOENT when it is gone, EINVAL for an invalid
    // id, EBADMSG (or ELOOP) for content that is not what the envelope says;
    // why() then says what it is instead.
    int open(const Store& store, std::string_view content_id, std::string_view ta_id,
             std::uint64_t size, SegmentFds* segments = nullptr, bool verify = false);
    std::uint64_t size() const { return size_; }
    // Why the last open() failed, for the log and the quarantine.
    const std::string& why() const { return why_; }
    // Up to max bytes from offset of the body into buf (resized); 0 or errno.
    int read_at(std::uint64_t offset, std::size_t max, std::string& buf) const;

private:
    // What a record's opening read brings beyond its header.
    static constexpr std::size_t prefetch = 16 * 1024;
    int open_record(int fd, std::uint64_t offset, std::string_view ta_id, std::uint64_t size,
                    bool verify);
    int refuse(int err, std::string why);

    std::shared_ptr<const OpenFile> file_;
    std::uint64_t start_ = 0, size_ = 0;
    std::string read_;       // a record's header and first bytes, as one pread brought them
    std::string_view head_;  // the body's first bytes, in read_
    std::string why_;
};

} // namespace smx::content
