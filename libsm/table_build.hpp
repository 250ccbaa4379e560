// `smx map build` and newaliases: a table's text compiled into the Berkeley
// DB file that hash: and btree: read (lookup_table.hpp), as postmap(1) and
// postalias(1) do, but never in place: the entries go into a new file beside
// the old one, which is synced and renamed over it, so a reader sees the old
// table or the new one, never half of one.
#pragma once

#include "libsm/table_text.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>

namespace smx::table {

enum class DbKind { hash, btree };

struct BuildResult {
    std::size_t entries = 0;     // stored
    std::size_t duplicates = 0;  // later entries of a key already stored (left out)
};

// Reads source (a regular file, not through a symbolic link, as tables are
// opened) and writes source + ".db": a temporary file in its directory made
// with O_EXCL, the mode of source (owner and group too, when root builds),
// each entry stored with its key and value NUL-terminated as postmap stores
// them, synced, renamed over source.db, the directory synced. A key given
// twice keeps its first value; warn gets "FILE, line N: duplicate entry
// \"key\" (first at line M); ignored" for each (up to max_duplicate_warnings,
// then one line with the count). Throws TableError ("FILE, line N: ..." for
// the text) and leaves source.db as it was.
BuildResult build(const std::string& source, DbKind kind, Syntax syntax,
                  const std::function<void(const std::string&)>& warn);

inline constexpr std::size_t max_duplicate_warnings = 100;

// What build makes for spec: a hash: or btree: table's kind and source
// file; nullopt for a type read as it is (texthash:, inline:).
struct Buildable {
    DbKind kind;
    std::string source;
};
std::optional<Buildable> buildable(const std::string& spec);

} // namespace smx::table
