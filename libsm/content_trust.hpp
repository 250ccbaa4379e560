// How a process opens content that another account wrote (docs/design.md,
// "Trust"): the one place a content file or a segment is opened for
// reading. SMTPS (smxs) writes messages and segments, QMGR (smxq) its DSNs
// and the copies a deferral makes; SMTPS may replace its own files at any
// moment, so every reader opens without following a symbolic link or
// blocking on a FIFO and then checks the descriptor, never the path: a
// regular file, one link, made by an account that may have made it, and
// no larger than the reader expects. Only then is anything read or
// allocated. A file that fails is a fact about one transaction (the caller
// quarantines or refuses it), never an exception.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace smx::content {

// The accounts that may have written content: SMTPS's messages and
// segments, QMGR's DSNs and deferral copies. The same uid for both when
// the MCP runs every process as one user.
struct Writers {
    uid_t smtps = 0;
    uid_t qmgr = 0;
};

// The environment variable through which the MCP tells each child the
// writers ("<smtps uid>:<qmgr uid>"), and its value.
inline constexpr const char* writers_env = "SMX_CONTENT_WRITERS";
std::string writers_env_value(const Writers& w);
// What the MCP said; without the variable (a process started on its own)
// this process's effective uid for both.
Writers writers_from_env();

// What a reader expects of a file.
struct Expect {
    uid_t owner = 0;
    uid_t other_owner = 0;  // a second account that may have made it (= owner: none)
    std::uint64_t max_size = 0;
    bool exact = false;     // the size must be max_size exactly
};

// Content of either writer, of exactly `size` bytes: a message's file.
Expect message_file(const Writers& w, std::uint64_t size);

// Where content lives and who may have written it: what every reader needs.
struct Store {
    std::string dir;  // Config::content_dir_abs()
    bool hashed = true;
    Writers writers;
};

// Opens path read-only (O_NOFOLLOW | O_NONBLOCK) and checks the
// descriptor against e. Returns 0 with fd (the caller closes it) and
// size; else an errno value with why set for the log: ENOENT (missing),
// ELOOP (a symbolic link), or EBADMSG (anything else that is not what e
// says: its type, links, owner or size), or what open or fstat said. fd is
// -1 on every error.
int open_checked(const std::string& path, const Expect& e, int& fd, std::uint64_t& size,
                 std::string& why);

} // namespace smx::content
