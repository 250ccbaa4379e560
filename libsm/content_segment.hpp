// Content segments: small messages appended to a shared file instead of a
// file each (creating and unlinking a file per message cost more CPU than
// the rest of the relay, docs/design.md). The one owner of the segment
// format, of the references that name a message in one, and of reading a
// message's body wherever it is kept (a content file or a segment record).
//
// A segment is <content_dir>/segments/<id>.seg, id a new_ta_id() (so its
// name says when it was made). A message in it is a record: a header of
// segment_header_size bytes (magic, data size, CRC32C of the data, the
// transaction id) and the data. Its reference, the envelope's cdb_id, is
// "<segment id>+<offset of the record, hex>". QMGR refuses a TA_COMMIT
// naming a segment made longer than [queue] segment_age ago (30 s), and
// removes a segment once it is that old and no transaction in memory names
// it; one SMTPS event loop appends to a segment for a sixth of that. So a
// segment never outlives its messages by much, and DEFEDB never names one:
// a deferred message is copied to a content file of its own first.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace sm::content {

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
std::optional<SegmentRef> parse_segment_ref(std::string_view cdb_id);
// A content file's id (valid_ta_id) or a segment reference.
bool valid_content_id(std::string_view cdb_id);

std::string segments_dir(const std::string& content_dir);
std::string segment_path(const std::string& content_dir, std::string_view segment);
// The segment id of a segment file name ("<id>.seg"), or empty.
std::string segment_of_file_name(std::string_view name);

// Writes the record of ta_id's data at offset of fd (one pwritev, retried
// while short). Returns 0 or an errno value.
int write_segment_record(int fd, std::uint64_t offset, std::string_view ta_id,
                         std::string_view data);

// A record's header as read back: checked for magic, and that the record
// lies within a file of file_size bytes (EBADMSG otherwise).
struct SegmentRecord {
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    std::string ta_id;
};
int read_segment_record(int fd, std::uint64_t offset, std::uint64_t file_size,
                        SegmentRecord& rec);

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
    explicit SegmentFds(std::string content_dir, std::size_t max_open = 32)
        : content_(std::move(content_dir)), max_open_(max_open) {}
    // The open segment; null with err set (an errno value) when it cannot be opened.
    std::shared_ptr<const OpenFile> get(const std::string& segment, int& err);
    // Lets go of the segments made before cutoff_us (ta_id_time_us).
    void close_before(std::uint64_t cutoff_us);
    std::size_t open_count() const { return open_.size(); }

private:
    std::string content_;
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

    // Opens the body cdb_id names under content_dir (Config::content_dir_abs()).
    // For a segment record: its header must be whole and for ta_id (when
    // not empty), and with verify its data must match the CRC (it is read
    // once). ENOENT when the file is gone, EINVAL for an invalid id,
    // EBADMSG for a record that is not what the reference says.
    // A segment comes from `segments` when given (its open descriptor shared).
    // size_hint, the body's size when the caller knows it (the envelope's),
    // lets a record up to the prefetch size be read whole in one pread of
    // just its bytes; a wrong one costs only another read.
    int open(const std::string& content_dir, std::string_view cdb_id, bool hashed,
             std::string_view ta_id = {}, bool verify = false, SegmentFds* segments = nullptr,
             std::uint64_t size_hint = 0);
    std::uint64_t size() const { return size_; }
    // Up to max bytes from offset of the body into buf (resized); 0 or errno.
    int read_at(std::uint64_t offset, std::size_t max, std::string& buf) const;

private:
    // What a record's opening read brings beyond its header.
    static constexpr std::size_t prefetch = 16 * 1024;
    int open_record(int fd, std::uint64_t offset, std::string_view ta_id, bool verify,
                    std::uint64_t size_hint);

    std::shared_ptr<const OpenFile> file_;
    std::uint64_t start_ = 0, size_ = 0;
    std::string read_;       // a record's header and first bytes, as one pread brought them
    std::string_view head_;  // the body's first bytes, in read_
};

} // namespace sm::content
