// The one writer of QMGR's quarantine directory: corrupt IBDB and DEFEDB
// records, envelopes whose content is gone, content files no transaction
// names or that are short. A copy for a human, so every write is checked and
// a partial copy is not left behind.
#pragma once

#include "libsm/content_trust.hpp"

#include <cstdint>
#include <string>
#include <string_view>

namespace smx::qmgr {

// Writes bytes to dir/name (mode 0600, created or replaced) durably, as a
// content file is written (smx::content::write_durable, tmp then rename).
// Returns "" or what failed, for the caller's log line; failures are also
// counted.
std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes);
// Moves the content file `from` to dir/name: a rename, or, when
// queue.content_dir is on another file system than the quarantine (EXDEV),
// a durable copy (mode 0600, as quarantine_write) and then an unlink, so
// that one quarantine directory holds everything. Only a file that is
// what `expect` allows (smx::content::open_checked: SMTPS's account may
// have put a link or a FIFO under the name) is kept; anything else is
// removed, and its kind said in why. Returns 0; ENOENT when `from` is
// gone; EBADMSG or ELOOP when it was no such file (removed); else an
// errno value (a failed copy, counted as a failed write, leaves `from`
// where it was).
int quarantine_move(const std::string& from, const std::string& dir, const std::string& name,
                    const smx::content::Expect& expect, std::string& why);
// Failed quarantine writes since start (`smx stats` quarantine_write_failures).
// Callers run on the event loop, IBDB's thread and the pool.
std::uint64_t quarantine_write_failures();

} // namespace smx::qmgr
