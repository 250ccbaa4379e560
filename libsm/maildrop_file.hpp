// Local submission's file format and names (docs/design.md, "Local
// submission"), the one owner of both: the sendmail command writes a
// submission to smx-postdrop's standard input, smx-postdrop writes it into
// <spool>/maildrop with the submitting uid (getuid(), never from its input),
// and smx-pickup reads it back. A local user writes both the submission and
// (through smx-postdrop) the file: every decoder here is strict and bounded.
//
//   "SMXDROP1"  u32 length  fields  content
//
// The 8-byte magic carries the version. length (big-endian) counts the
// fields: TLVs as in libsm/record.hpp (u16 tag, u32 length, bytes), every
// tag mandatory. content is the message as it goes on the wire after the
// Received: header: CRLF line ends, no bare CR or LF, not dot-stuffed,
// exactly content_size bytes, and the file ends with it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::maildrop {

inline constexpr std::string_view magic = "SMXDROP1";
inline constexpr std::size_t prefix_size = 12;  // magic and the fields' length
// The fields of a file: the most an envelope may take between the processes
// (TA_COMMIT, messages.hpp), so that whatever pickup decodes can be committed.
std::size_t max_fields();

// What a submission is (sendmail to smx-postdrop) or a file is (smx-postdrop
// to smx-pickup): a file also carries the uid and the time smx-postdrop
// wrote it; a submission must not.
enum class Kind { submission, file };

struct Envelope {
    std::uint32_t uid = 0;         // a file's: who ran smx-postdrop
    std::uint64_t arrival_us = 0;  // a file's: when
    std::string sender;            // empty: the null sender <>
    std::vector<std::string> rcpts;
    std::uint64_t content_size = 0;
};

// The prefix and the fields: what goes before the content.
std::string encode(const Envelope& e, Kind kind);

// The length of the fields that follow a prefix, or nullopt with err (not
// this format or version, or longer than max_fields()).
std::optional<std::uint32_t> fields_length(std::string_view prefix, std::string& err);

// The fields, checked: each tag known and once (a recipient at least once),
// integers of their width, every address valid (smx::valid_address; ASCII),
// the uid and time present exactly in a file. nullopt with err.
std::optional<Envelope> decode(std::string_view fields, Kind kind, std::string& err);

// Checks content as it streams by: CRLF line ends only, and whether any
// octet is 8-bit (the commit then says BODY=8BITMIME).
class ContentCheck {
public:
    void feed(std::string_view bytes);
    // Empty, or why the content seen is not what the format allows (a bare
    // CR or LF, no CRLF at its end).
    std::string finish() const;
    bool eight_bit() const { return eight_bit_; }

private:
    bool after_cr_ = false;   // the last octet seen was a CR
    bool bare_ = false;       // a CR not followed by LF, or an LF without CR
    bool ends_crlf_ = true;   // nothing yet, or the last two octets were CRLF
    bool eight_bit_ = false;
};

// File names in the maildrop directory: the names smx-postdrop writes (t:
// being written, m: ready), the name smx-pickup gives a file whose
// transaction it has committed or is committing (p + the transaction id),
// and the random part of a new name.
inline constexpr char writing_prefix = 't';
inline constexpr char ready_prefix = 'm';
inline constexpr char committing_prefix = 'p';
// 't' or 'm' and 32 lower-case hex digits, or 'p' and a transaction id.
bool valid_name(std::string_view name);
std::string random_part();  // 32 lower-case hex digits from getrandom(2)

} // namespace smx::maildrop
