// Content files (the CDB), the one owner of how they are made, read, removed
// and found, as postfix's mail_queue.c is: SMTPS's writer and QMGR's DSNs
// create them (and QMGR its quarantine copies), SMTPC reads them, the reaper
// removes them, the orphan sweeper lists them. Two ways to create one:
// create() + close_created() write under the final name at once, for a
// file nothing reads before its writer names it to QMGR (SMTPS: TA_COMMIT
// follows the close); write_durable() writes <path>.tmp, fdatasyncs and
// renames, so that a partial file never carries the final name. Either
// removes the file on an error. Names and
// paths: sm::valid_ta_id and sm::cdb_path (ids.hpp); every operation that
// takes an id refuses one valid_ta_id rejects (EINVAL), since ids become
// file names. Every function returns 0 or an errno value.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace sm::content {

// Group read: SMTPC and QMGR read content files through a shared group when
// the MCP runs each process as its own user.
constexpr mode_t file_mode = 0640;

// Creates path (with mode) for writing, creating its parent directory on
// first use. The name must be new (O_EXCL, else EEXIST): an id names one
// file only, and an error path then never removes another's file.
int create(const std::string& path, int& fd, mode_t mode = file_mode);
// Writes all of data to fd (retrying short writes and EINTR).
int write_all(int fd, std::string_view data);
// Ends a write begun with create(): err is what went wrong so far. Without
// an error: fdatasync (unless sync is false: then a later syncfs of the
// file system must make it durable), close. With one (or on a failure
// here): close, unlink path. Returns err untouched when fd < 0 (create
// failed: there is no file of ours).
int close_created(int fd, int err, const std::string& path, bool sync = true);
// Writes data held whole in memory to <path>.tmp, fdatasyncs, renames it
// to path; on an error nothing is left.
int write_durable(const std::string& path, std::string_view data, mode_t mode = file_mode);

// Opens content file id under spool_dir for reading (fd: a new descriptor
// the caller closes); ENOENT when it is gone.
int open_read(const std::string& spool_dir, std::string_view id, bool hashed, int& fd);
// Unlinks content file id under spool_dir; ENOENT when it was not there.
int remove(const std::string& spool_dir, std::string_view id, bool hashed);
// Appends to ids the ids of the content files under spool_dir (flat or
// hashed) last written before cutoff. Anything else is skipped: .tmp files
// (not durable yet), names that are not ids, what is not a regular file. A
// spool without cdb/ yet holds none.
int list(const std::string& spool_dir, std::filesystem::file_time_type cutoff,
         std::vector<std::string>& ids);

} // namespace sm::content
