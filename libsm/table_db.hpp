// Berkeley DB's error reports, for the readers (lookup_table.cpp) and the
// builder (table_build.cpp) of hash: and btree: files.
#pragma once

#include <db_cxx.h>

#include <string>

namespace smx::table {

// Berkeley DB says what went wrong through a callback, not in its return
// values: this has db's messages kept for error_text on the calling thread.
void report_errors(Db& db);
// r's text, with what Berkeley DB last said on this thread since the last
// call: "Invalid argument (unexpected file type or format)".
std::string error_text(int r);

} // namespace smx::table
