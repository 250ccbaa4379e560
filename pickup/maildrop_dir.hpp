// The maildrop as smx-pickup sees it: the one place its files are opened,
// checked, copied into the content store and renamed. A local user wrote
// each file (through smx-postdrop), and the pickup account may have put
// anything there: every file is opened without following a link or
// blocking on a FIFO and checked on its descriptor (a regular file with one
// link, owned by the uid it records, sizes within the limits) before a
// byte of it is read or allocated. A file that fails goes to
// <spool>/maildrop-quarantine with a log line; nothing here throws for it.
//
// A file's states are its names (libsm/maildrop_file.hpp): m<random>
// ready; p<id> once its message is in content file <id> (written, synced)
// and its transaction is being committed to QMGR under that id. After a
// restart a p file is committed again under the same id (QMGR refuses a
// second copy of one it holds as a duplicate) unless its content file is
// gone: QMGR removes that only once the transaction is done. Blocking:
// smx-pickup calls these on its worker thread.
#pragma once

#include "libsm/config.hpp"
#include "libsm/fd.hpp"
#include "libsm/maildrop_file.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace smx::pickup {

// A message ready to commit: in content file `id`, its maildrop file named p<id>.
struct Taken {
    std::string id;          // transaction id, and the content file's
    std::string ready_name;  // m<random> before, to give it back
    smx::maildrop::Envelope env;
    std::uint64_t size = 0;  // of the content file: Received: and the message
    bool eight_bit = false;
    bool resumed = false;    // of an earlier run: the milters may have seen it
};

// What became of one file.
struct Outcome {
    enum class Kind { taken, gone, done, quarantined, failed } kind = Kind::gone;
    std::optional<Taken> taken;  // kind taken
    std::string why;             // done (with the id), failed: for the log
};

class MaildropDir {
public:
    // The directories smx run made; throws std::runtime_error when one
    // cannot be opened.
    explicit MaildropDir(const smx::Config& cfg);

    struct Listing {
        std::vector<std::string> ready;       // oldest first
        std::vector<std::string> committing;  // p files of an earlier run
    };
    // What is there; temporaries smx-postdrop left more than an hour ago are
    // removed, names that are no maildrop file's are quarantined.
    Listing list();

    // A ready file: checked, its message (after a Received: header naming
    // the user) written to a new content file and synced, then renamed p<id>.
    Outcome take(const std::string& name);
    // A p file of an earlier run: to commit again (its content file is
    // there) or done (it is not).
    Outcome resume(const std::string& name);

    // The transaction is QMGR's: the maildrop file goes.
    void done(const Taken& t);
    // QMGR could not take it now: content file removed, the maildrop file
    // ready again under its old name.
    void give_back(const Taken& t);
    // QMGR refused it for good: content file removed, the maildrop file to
    // quarantine.
    void refused(const Taken& t, const std::string& why);

    // t's content file for reading (the milters); -1 with why when it cannot be.
    int open_content(const Taken& t, std::string& why) const;
    // The milters' edits: head (the edited header fields and the empty line)
    // and either body or the old content from body_at on, written to a new
    // file, synced and renamed over t's content file (size and 8bit
    // updated); an error text when it cannot be.
    std::string replace_content(Taken& t, const std::string& head,
                                const std::optional<std::string>& body, std::uint64_t body_at);

    const std::string& path() const { return path_; }
    // server.max_message_size after a reload (any thread).
    void set_max_size(std::uint64_t n) { max_size_ = n; }
    std::uint64_t max_size() const { return max_size_; }

private:
    // The checked envelope of an open maildrop file, and where its content begins.
    struct Checked {
        smx::maildrop::Envelope env;
        std::uint64_t content_at = 0;
    };
    std::optional<Checked> check(int fd, std::string& why) const;
    // Copies the content into a new content file after its Received:
    // header; bad_file: the content is not what the format allows.
    enum class Copy { ok, bad_file, failed };
    Copy copy(int fd, const Checked& c, Taken& t, std::string& why) const;
    void quarantine(const std::string& name, const std::string& why);
    std::string received(const Taken& t) const;

    const smx::Config& cfg_;  // its restart-only keys
    std::atomic<std::uint64_t> max_size_;
    std::string path_, quarantine_path_, content_;
    smx::Fd dir_, quarantine_;
};

} // namespace smx::pickup
