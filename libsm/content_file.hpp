// Content files (the CDB): how one is made durable, for SMTPS's writer and
// QMGR's DSNs (and its quarantine copies). Postfix keeps this discipline in
// mail_queue.c; here: write <path>.tmp, fdatasync, rename to <path>, and on
// any error remove the .tmp, so a reader never sees a partial file under the
// final name. Names and paths: sm::valid_ta_id and sm::cdb_path (ids.hpp).
// Every function returns 0 or an errno value.
#pragma once

#include <string>
#include <string_view>
#include <sys/types.h>

namespace sm::content {

// Group read: SMTPC and QMGR read content files through a shared group when
// the MCP runs each process as its own user.
constexpr mode_t file_mode = 0640;

// Opens (creates or truncates, with mode) the temporary file tmp, creating
// its parent directory on first use.
int open_tmp(const std::string& tmp, int& fd, mode_t mode = file_mode);
// Writes all of data to fd (retrying short writes and EINTR).
int write_all(int fd, std::string_view data);
// Ends a write begun with open_tmp: err is what went wrong so far. Without
// an error: fdatasync, close, rename tmp to path. With one (or on a failure
// here): close, unlink tmp. Closes fd in every case when it is >= 0.
int finish(int fd, int err, const std::string& tmp, const std::string& path);
// open_tmp + write_all + finish for data held whole in memory.
int write_durable(const std::string& path, std::string_view data, mode_t mode = file_mode);

} // namespace sm::content
