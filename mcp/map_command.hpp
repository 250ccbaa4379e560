// `smx map build|query|dump`: postmap(1) and postalias(1) for smx's lookup
// tables (libsm/lookup_table.hpp, libsm/table_build.hpp; docs/tables.md).
#pragma once

#include <istream>
#include <ostream>
#include <string>
#include <vector>

namespace smx::mcp {

// Exit statuses of `smx map query`, as postmap -q: found, not found; any
// other error is 2 (and a usage error 64, as every smx command).
inline constexpr int exit_map_found = 0;
inline constexpr int exit_map_not_found = 1;
inline constexpr int exit_map_error = 2;

// ops: what follows "map" on the command line, as given.
int map_command(const std::vector<std::string>& ops, std::istream& in, std::ostream& out,
                std::ostream& err);

} // namespace smx::mcp
