// The message body as SMTPC sends it: the CDB file read in large blocks and
// dot-stuffed on the way out (RFC 5321 4.5.2).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace smtpc {

// Appends `in` to `out`, doubling a '.' at the start of every line. `bol`
// carries "the previous block ended with LF" from one block to the next.
void dot_stuff(std::string_view in, bool& bol, std::string& out);

// An open CDB file; read with pread so that a retry on another connection
// starts from the beginning again.
class MessageFile {
public:
    MessageFile() = default;
    ~MessageFile();
    MessageFile(const MessageFile&) = delete;
    MessageFile& operator=(const MessageFile&) = delete;

    // Empty string on success, else the reason ("queue file missing").
    std::string open(const std::string& path);
    std::uint64_t size() const { return size_; }
    // Reads up to `max` bytes at `offset` into buf (resized); false on an
    // I/O error.
    bool read_at(std::uint64_t offset, std::size_t max, std::string& buf) const;

private:
    int fd_ = -1;
    std::uint64_t size_ = 0;
};

} // namespace smtpc
