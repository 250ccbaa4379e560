// Content files, the one owner of how they are made, read, removed
// and found, as postfix's mail_queue.c is: SMTPS's writer and QMGR's DSNs
// create them (and QMGR its quarantine copies), SMTPC reads them, the reaper
// removes them, the orphan sweeper lists them. Two ways to create one:
// create() + close_created() write under the final name at once, for a
// file nothing reads before its writer names it to QMGR (SMTPS: TA_COMMIT
// follows the close); write_durable() writes <path>.tmp, fdatasyncs and
// renames, so that a partial file never carries the final name. Either
// removes the file on an error. Names: smx::valid_ta_id (ids.hpp); paths:
// file_path below, the one place that lays them out; every operation that
// takes an id refuses one valid_ta_id rejects (EINVAL), since ids become
// file names. Every function returns 0 or an errno value.
#pragma once

#include "libsm/config.hpp"
#include "libsm/content_trust.hpp"

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

namespace smx::content {

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
// file system must make it durable), close, and with sync_name an fsync
// of path's directory (a new name that no later sync of its file system
// covers). With an error (or on a failure here): close, unlink path.
// Returns err untouched when fd < 0 (create failed: there is no file of ours).
int close_created(int fd, int err, const std::string& path, bool sync = true,
                  bool sync_name = false);
// The other way: creates the temporary file tmp (with mode) anew, after
// unlinking whatever has that name (never opened through it), creating its
// parent directory on first use...
int open_tmp(const std::string& tmp, int& fd, mode_t mode = file_mode);
// ...and ends that write: err is what went wrong so far. Without one:
// fdatasync, close, rename tmp to path (and with sync_name an fsync of
// path's directory). With one (or on a failure here): nothing is left.
int finish_tmp(int fd, int err, const std::string& tmp, const std::string& path,
               bool sync_name = false);
// open_tmp + write_all + finish_tmp for data held whole in memory.
int write_durable(const std::string& path, std::string_view data, mode_t mode = file_mode,
                  bool sync_name = false);
// fsync of a directory: makes the names in it durable.
int sync_dir(const std::string& dir);
// True when both paths exist on one file system (same st_dev): one sync of
// it covers both. False when either cannot be looked at.
bool same_file_system(const std::string& a, const std::string& b);
// Whether a content file's writer must fsync its directory after creating
// the name (close_created's and write_durable's sync_name): with
// content_sync = "file" the IBDB's fdatasync commits the new name with it
// on ext4 and XFS, but only when the IBDB is on the content's file system.
// "batch" needs none: QMGR's syncfs of the content file system covers
// names too.
bool sync_names(const Config& cfg);

// Where this process reads content: cfg's content directory and layout, and
// the writers the MCP named (writers_from_env).
Store store_for(const Config& cfg);

// content_dir below is Config::content_dir_abs().
// <content_dir>/XX/<id> (hashed: XX = two hex digits of a hash of the id)
// or <content_dir>/<id>.
std::string file_path(const std::string& content_dir, std::string_view id, bool hashed);
// Opens content file id under content_dir for reading, checked against
// expect (open_checked: fd a new descriptor the caller closes, size its
// size); ENOENT when it is gone, EINVAL for an id that is not one.
int open_read(const std::string& content_dir, std::string_view id, bool hashed,
              const Expect& expect, int& fd, std::uint64_t& size, std::string& why);
// Whether open_read would give a descriptor (opened, checked and closed).
int check_read(const std::string& content_dir, std::string_view id, bool hashed,
               const Expect& expect, std::string& why);
// Unlinks content file id under content_dir; ENOENT when it was not there.
int remove(const std::string& content_dir, std::string_view id, bool hashed);
// Appends to ids the names under content_dir (flat or hashed) that are
// content file ids, last changed before cutoff, and not directories: a
// regular file, or whatever else SMTPS's account may have put there
// under such a name (a link, a FIFO: its own time, never its target's).
// Anything else is skipped: .tmp files (not durable yet), names that are
// not ids. A content_dir that does not exist yet holds none.
int list(const std::string& content_dir, std::chrono::system_clock::time_point cutoff,
         std::vector<std::string>& ids);

} // namespace smx::content
