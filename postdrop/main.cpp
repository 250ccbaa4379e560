// smx-postdrop: the one privileged step of local submission, as postfix's
// postdrop. Installed setgid to server.maildrop_group (smxdrop), whose
// members may create files in <spool>/maildrop (mode 1730: they may not list
// it, and the sticky bit keeps them from removing one another's files). It
// reads a submission (libsm/maildrop_file.hpp) from its standard input,
// checks it, and writes it as a maildrop file with the uid of whoever ran
// it (getuid(), never from the input) and the time: under a temporary name,
// fsynced, then renamed to its final name, which smx-pickup takes. Once it
// exits 0 the message survives a crash of anything.
//
// The group is needed only to create the file: the config and the input
// are read with the caller's own group, so that -c cannot read what only
// the group may (docs/design.md, "Local submission").
//
// Exit status: sysexits.h, with one line on standard error saying why.
#include "libsm/config.hpp"
#include "libsm/ids.hpp"
#include "libsm/maildrop_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sysexits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <stdexcept>
#include <string>

#if defined(__SANITIZE_ADDRESS__)
// The sanitizer build: LeakSanitizer cannot work in a setgid process (it is
// not dumpable, so LSan can read neither its own /proc files nor
// ASAN_OPTIONS) and would fail every submission at exit. ASan and UBSan still
// check smx-postdrop; the maildrop codec it uses is leak-checked by the
// unit tests and the fuzz target.
extern "C" int __lsan_is_turned_off() { return 1; }
#endif

namespace {

constexpr std::size_t chunk = 64 * 1024;

// Why the command fails, and its exit status.
struct Failure : std::runtime_error {
    Failure(int status, const std::string& what) : std::runtime_error(what), status(status) {}
    int status;
};

std::string errno_text() { return std::strerror(errno); }

// Reads exactly n bytes of standard input (false: it ended first).
bool read_exact(char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t got = ::read(0, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) throw Failure(EX_IOERR, "reading the message: " + errno_text());
        if (got == 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
    }
    return true;
}

void write_all(int fd, const char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t put = ::write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put < 0)
            throw Failure(errno == ENOSPC || errno == EDQUOT ? EX_TEMPFAIL : EX_IOERR,
                          "writing the maildrop file: " + errno_text());
        p += put;
        n -= static_cast<std::size_t>(put);
    }
}

smx::Config load(const char* path) {
    try {
        return smx::load_config(path);
    } catch (const std::exception& e) {
        throw Failure(EX_CONFIG, std::string("config ") + (*path ? path : "(defaults)") + ": " +
                                     e.what());
    }
}

// The submission's envelope, as this caller's: uid and time are ours.
smx::maildrop::Envelope read_envelope(const smx::Config& cfg) {
    std::string prefix(smx::maildrop::prefix_size, '\0');
    std::string err;
    if (!read_exact(prefix.data(), prefix.size()))
        throw Failure(EX_DATAERR, "the input ended before the envelope");
    const auto n = smx::maildrop::fields_length(prefix, err);
    if (!n) throw Failure(EX_DATAERR, "bad submission: " + err);
    std::string fields(*n, '\0');
    if (!read_exact(fields.data(), fields.size()))
        throw Failure(EX_DATAERR, "the input ended within the envelope");
    auto e = smx::maildrop::decode(fields, smx::maildrop::Kind::submission, err);
    if (!e) throw Failure(EX_DATAERR, "bad submission: " + err);
    if (e->content_size > cfg.server.max_message_size)
        throw Failure(EX_DATAERR, "message of " + std::to_string(e->content_size) +
                                      " bytes exceeds max_message_size (" +
                                      std::to_string(cfg.server.max_message_size) + ")");
    e->uid = static_cast<std::uint32_t>(::getuid());
    e->arrival_us = smx::now_us();
    return *e;
}

// The file under its temporary name, then under its final one; removed on
// any failure before the rename.
class DropFile {
public:
    DropFile(int dir, std::string name) : dir_(dir), name_(std::move(name)) {
        fd_ = ::openat(dir_, name_.c_str(),
                       O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd_ < 0)
            throw Failure(errno == EACCES ? EX_NOPERM : EX_CANTCREAT,
                          "cannot create a file in the maildrop: " + errno_text() +
                              (errno == EACCES ? " (is smx-postdrop setgid to "
                                                 "server.maildrop_group?)"
                                               : ""));
    }
    ~DropFile() {
        if (fd_ >= 0) ::close(fd_);
        if (!renamed_) ::unlinkat(dir_, name_.c_str(), 0);
    }
    int fd() const { return fd_; }
    // Readable by its user and by smx-pickup (not in the group: "other"),
    // not by the group, which every smx-postdrop has: 0404. Durable under
    // `final` when this returns.
    void finish(const std::string& final) {
        if (::fchmod(fd_, 0404) != 0 || ::fsync(fd_) != 0)
            throw Failure(EX_IOERR, "syncing the maildrop file: " + errno_text());
        if (::renameat2(dir_, name_.c_str(), dir_, final.c_str(), RENAME_NOREPLACE) != 0)
            throw Failure(EX_IOERR, "renaming the maildrop file: " + errno_text());
        renamed_ = true;
        // The group may not read the directory, so it cannot be opened to be
        // synced: ext4 and XFS commit a rename with the inode's next fsync.
        if (::fsync(fd_) != 0) throw Failure(EX_IOERR, "syncing the maildrop file: " + errno_text());
    }

private:
    int dir_;
    std::string name_;
    int fd_ = -1;
    bool renamed_ = false;
};

std::string drop(const smx::Config& cfg, gid_t drop_gid) {
    const auto env = read_envelope(cfg);
    const std::string maildrop = cfg.maildrop_dir_abs();
    // Only with the group may we pass through the directory.
    if (::setegid(drop_gid) != 0) throw Failure(EX_OSERR, "setegid: " + errno_text());
    const int dir = ::open(maildrop.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dir < 0)
        throw Failure(EX_UNAVAILABLE, "cannot open " + maildrop + ": " + errno_text() +
                                          (errno == ENOENT ? " (smx run makes it)" : ""));
    const std::string header = smx::maildrop::encode(env, smx::maildrop::Kind::file);
    struct statvfs vfs;
    if (::fstatvfs(dir, &vfs) == 0 &&
        static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize <
            cfg.queue.min_free_space + header.size() + env.content_size)
        throw Failure(EX_TEMPFAIL, "insufficient system storage in " + maildrop +
                                       " (below queue.min_free_space); try again later");
    const std::string random = smx::maildrop::random_part();
    DropFile f(dir, smx::maildrop::writing_prefix + random);
    write_all(f.fd(), header.data(), header.size());
    smx::maildrop::ContentCheck check;
    std::string buf(chunk, '\0');
    for (std::uint64_t left = env.content_size; left > 0;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk));
        if (!read_exact(buf.data(), n))
            throw Failure(EX_DATAERR, "the input ended within the message");
        check.feed({buf.data(), n});
        write_all(f.fd(), buf.data(), n);
        left -= n;
    }
    char extra;
    if (read_exact(&extra, 1)) throw Failure(EX_DATAERR, "more input than the message size");
    if (const std::string bad = check.finish(); !bad.empty())
        throw Failure(EX_DATAERR, "bad submission: " + bad);
    const std::string final = smx::maildrop::ready_prefix + random;
    f.finish(final);
    return final;
}

} // namespace

int main(int argc, char** argv) {
    // The group this program is setgid to; given up until it is needed.
    const gid_t drop_gid = ::getegid();
    if (::setegid(::getgid()) != 0) {
        std::perror("smx-postdrop: setegid");
        return EX_OSERR;
    }
    ::umask(077);
    std::string cfg_path = SMX_DEFAULT_CONFIG;
    bool given = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-c" && i + 1 < argc) {
            cfg_path = argv[++i];
            given = true;
        } else {
            std::cerr << "usage: smx-postdrop [-c FILE] < submission (the sendmail command "
                         "runs it)\n";
            return EX_USAGE;
        }
    }
    if (!given && ::access(cfg_path.c_str(), F_OK) != 0) cfg_path.clear();
    try {
        const smx::Config cfg = load(cfg_path.c_str());
        std::cout << drop(cfg, drop_gid) << '\n';
        return EX_OK;
    } catch (const Failure& e) {
        std::cerr << "smx-postdrop: " << e.what() << '\n';
        return e.status;
    } catch (const std::exception& e) {
        std::cerr << "smx-postdrop: " << e.what() << '\n';
        return EX_SOFTWARE;
    }
}
