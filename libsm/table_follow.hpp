// A table that follows its file (lookup_table.hpp, open()): the one open
// answers until the file at its path is another (renamed over it by `smx map
// build`, or rewritten in place), then the new one does.
#pragma once

#include "libsm/lookup_table.hpp"

#include <chrono>
#include <functional>
#include <memory>
#include <string>

namespace smx::table {

// How often at most a lookup looks at the file.
inline constexpr auto follow_interval = std::chrono::seconds(1);

// open() the table now (its TableError goes to the caller), and again when
// path's identity changes. Lookups on several threads at once take no lock:
// the table in use is an atomic shared_ptr, swapped by the one lookup that
// found the change; a lookup in progress keeps the old table (and its open
// file) until it is done.
std::shared_ptr<const Table> follow(const std::string& spec, const std::string& path,
                                    std::function<std::shared_ptr<const Table>()> open);

} // namespace smx::table
