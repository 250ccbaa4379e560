#include "mcp/privsep.hpp"

#include "libsm/fd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

namespace smx::mcp {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

using smx::Fd;

std::optional<RunAs> lookup_user(const std::string& key, const std::string& name,
                                 std::string& err) {
    const passwd* pw = ::getpwnam(name.c_str());
    if (!pw) {
        err = "server." + key + ": no such user '" + name +
              "' (create it as root with scripts/lib/setup.sh, or: adduser --system --group "
              "--no-create-home " + name + ")";
        return std::nullopt;
    }
    return RunAs{name, pw->pw_uid, pw->pw_gid, {}};
}

// One-user mode keeps the account's own groups, as before there were three.
std::vector<gid_t> own_groups(const RunAs& r) {
    std::vector<gid_t> groups;
    int n = 16;
    for (;;) {
        groups.resize(static_cast<std::size_t>(n));
        const int want = n;
        if (::getgrouplist(r.name.c_str(), r.gid, groups.data(), &n) >= 0) break;
        if (n <= want) n = want * 2;  // some libcs do not report the size needed
    }
    groups.resize(static_cast<std::size_t>(n));
    return groups;
}

// <content_dir>/00 .. FF: the same upper-case hex names as smx::content::file_path().
std::string hashed_dir(int i) {
    static const char hex[] = "0123456789ABCDEF";
    return {hex[i >> 4], hex[i & 15]};
}

// What a directory and the regular files directly in it should be.
struct Layout {
    uid_t uid;
    gid_t gid;
    mode_t mode;
    // Files: their group and exact mode; or, with file_mode 0, only the
    // owner set to uid and group/other bits cleared.
    gid_t file_gid;
    mode_t file_mode;
};

// The directory `name` under `parent`, created if missing, opened without
// following a symbolic link (a child may have planted one: chown through it
// would give away whatever it points to).
Fd open_dir(int parent, const std::string& name, const std::string& shown, std::string& err) {
    if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
        err = "cannot create " + shown + ": " + errno_text();
        return Fd();
    }
    Fd fd(::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (fd.get() < 0) {
        err = (errno == ELOOP || errno == ENOTDIR)
                  ? shown + " is a symbolic link or not a directory; refusing to use it"
                  : "cannot open " + shown + ": " + errno_text();
    }
    return fd;
}

bool file_ok(const struct stat& st, const Layout& l) {
    if (l.file_mode != 0)
        return st.st_gid == l.file_gid && (st.st_mode & 07777) == l.file_mode;
    return st.st_uid == l.uid && (st.st_mode & 077) == 0;
}

// Left over from a one-user run or an older layout: only the files directly
// in the directory (the spool has no deeper ones), each through its own fd.
bool fix_files(int dir, const std::string& shown, const Layout& l, std::string& err) {
    DIR* d = ::fdopendir(::fcntl(dir, F_DUPFD_CLOEXEC, 0));
    if (!d) {
        err = "cannot list " + shown + ": " + errno_text();
        return false;
    }
    struct Closedir {
        void operator()(DIR* p) const { ::closedir(p); }
    };
    std::unique_ptr<DIR, Closedir> guard(d);
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        struct stat st;
        if (name == "." || name == ".." ||
            ::fstatat(dir, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISREG(st.st_mode) || file_ok(st, l))
            continue;
        const std::string path = shown + "/" + name;
        Fd fd(::openat(dir, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
        if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0) {
            if (errno == ENOENT) continue;  // QMGR of a previous run took it
            err = "cannot open " + path + ": " + errno_text();
            return false;
        }
        if (!S_ISREG(st.st_mode) || st.st_nlink != 1) {
            err = path + " has " + std::to_string(st.st_nlink) +
                  " hard links or is not a regular file; refusing to take it over";
            return false;
        }
        const bool ok = l.file_mode != 0
                            ? ::fchown(fd.get(), static_cast<uid_t>(-1), l.file_gid) == 0 &&
                                  ::fchmod(fd.get(), l.file_mode) == 0
                            : ::fchown(fd.get(), l.uid, static_cast<gid_t>(-1)) == 0 &&
                                  ::fchmod(fd.get(), st.st_mode & 0700) == 0;
        if (!ok) {
            err = "cannot take over " + path + ": " + errno_text();
            return false;
        }
    }
    return true;
}

bool own(int dir, const std::string& shown, uid_t uid, gid_t gid, mode_t mode, std::string& err) {
    if (::fchown(dir, uid, gid) != 0 || ::fchmod(dir, mode) != 0) {
        err = "cannot set the owner of " + shown + ": " + errno_text();
        return false;
    }
    return true;
}

bool lay_out(int dir, const std::string& shown, const Layout& l, std::string& err) {
    return own(dir, shown, l.uid, l.gid, l.mode, err) && fix_files(dir, shown, l, err);
}

// The missing directories of an absolute path, made 0755 whatever the
// umask (027 in smx run): every account passes through them, as through
// one `mkdir -p` made (./var of the built-in defaults).
bool make_parents(const fs::path& dir, std::string& err) {
    fs::path made;
    for (const auto& step : dir) {
        made /= step;
        if (::mkdir(made.c_str(), 0755) == 0) {
            if (::chmod(made.c_str(), 0755) == 0) continue;
        } else if (errno == EEXIST) {
            continue;
        }
        err = "cannot create " + made.string() + ": " + errno_text();
        return false;
    }
    return true;
}

// An absolute directory the operator named (spool_dir, run_dir, a
// content_dir or ibdb_dir outside the spool): its parents are the
// operator's, only the last step may be a child's doing.
Fd open_top(const std::string& path, std::string& err) {
    const fs::path p(path);
    if (!make_parents(p.parent_path(), err)) return Fd();
    Fd parent(::open(p.parent_path().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (parent.get() < 0) {
        err = "cannot open " + p.parent_path().string() + ": " + errno_text();
        return Fd();
    }
    return open_dir(parent.get(), p.filename().string(), path, err);
}

// A store's directory: in the spool (config.cpp allows only its direct
// subdirectories there) through the spool's fd, else as the operator named it.
Fd open_store(int spool_fd, const std::string& spool, const std::string& dir, std::string& err) {
    const fs::path p(dir);
    if (p.parent_path() == spool) return open_dir(spool_fd, p.filename().string(), dir, err);
    return open_top(dir, err);
}

bool make_dirs_as_root(const smx::Config& cfg, const Accounts& a, std::string& err) {
    const uid_t root = 0;
    const std::string spool = cfg.spool_dir_abs();
    // Only the children's group may list the spool. Others may pass through
    // it, to reach the maildrop through smx-postdrop: every directory in it
    // decides for itself (its mode below), as postfix's 0755 queue directory.
    Fd top = open_top(spool, err);
    if (top.get() < 0 || !lay_out(top.get(), spool, {root, a.group, 0751, 0, 0}, err))
        return false;
    // QMGR's alone.
    for (const auto& dir : {cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(), cfg.quarantine_dir_abs()}) {
        const Layout l{a.qmgr.uid, a.qmgr.gid, 0700, 0, 0};
        Fd d = open_store(top.get(), spool, dir, err);
        if (d.get() < 0 || !lay_out(d.get(), dir, l, err)) return false;
    }
    // Content: QMGR owns it (bounces, unlinks); SMTPS creates files through
    // its own group, and the sticky bit keeps it from removing QMGR's;
    // SMTPC may only pass through (other: x) and read (files 0640, group smx).
    const Layout content_layout{a.qmgr.uid, a.smtps_group, 01771, a.group, 0640};
    const std::string content = cfg.content_dir_abs();
    Fd c = open_store(top.get(), spool, content, err);
    if (c.get() < 0 || !lay_out(c.get(), content, content_layout, err)) return false;
    // The content segments' directory is laid out as the hashed ones.
    std::vector<std::string> subdirs{"segments"};
    if (cfg.queue.cdb_hashed)
        for (int i = 0; i < 256; ++i) subdirs.push_back(hashed_dir(i));
    for (const auto& name : subdirs) {
        Fd d = open_dir(c.get(), name, content + "/" + name, err);
        if (d.get() < 0 || !lay_out(d.get(), content + "/" + name, content_layout, err)) return false;
    }
    // The maildrop is smx-pickup's (it runs as SMTPS's account), which takes
    // files out of it; smx-postdrop's group may create files in it but not
    // list it, and the sticky bit keeps a user from removing another's file.
    // Its files stay as their users made them: the owner is what pickup
    // checks. What pickup refuses goes to its own quarantine.
    const std::string maildrop = cfg.maildrop_dir_abs();
    Fd m = open_dir(top.get(), "maildrop", maildrop, err);
    if (m.get() < 0 || !own(m.get(), maildrop, a.smtps.uid, a.maildrop_group, 01730, err))
        return false;
    const std::string bad = cfg.maildrop_quarantine_dir_abs();
    Fd q = open_dir(top.get(), "maildrop-quarantine", bad, err);
    if (q.get() < 0 || !own(q.get(), bad, a.smtps.uid, a.smtps_group, 0700, err)) return false;
    // QMGR makes qmgr.sock here; smx.pid, also here, is opened with care
    // (PidLock). Others may enter to reach the socket, whose mode decides.
    const std::string run = cfg.run_dir_abs();
    Fd r = open_top(run, err);
    return r.get() >= 0 && own(r.get(), run, a.qmgr.uid, a.group, 0755, err);
}

} // namespace

namespace {

std::optional<gid_t> lookup_group(const std::string& key, const std::string& name,
                                  std::string& err) {
    const group* gr = ::getgrnam(name.c_str());
    if (!gr) {
        err = "server." + key + ": no such group '" + name +
              "' (create it as root with scripts/lib/setup.sh, or: groupadd --system " + name +
              ")";
        return std::nullopt;
    }
    return gr->gr_gid;
}

} // namespace

std::optional<Accounts> lookup_accounts(const smx::Config& cfg, std::string& err) {
    if (::geteuid() != 0) return std::nullopt;
    const auto& s = cfg.server;
    Accounts a;
    const auto drop = lookup_group("maildrop_group", s.maildrop_group, err);
    if (!drop) return std::nullopt;
    a.maildrop_group = *drop;
    if (!s.user.empty()) {
        auto r = lookup_user("user", s.user, err);
        if (!r) return std::nullopt;
        r->groups = own_groups(*r);
        a.smtps = a.qmgr = a.smtpc = *r;
        a.group = a.smtps_group = r->gid;
        return a;
    }
    const auto shared = lookup_group("group", s.group, err);
    if (!shared) return std::nullopt;
    a.group = *shared;
    for (auto [key, name, r] : {std::tuple{"smtps_user", &s.smtps_user, &a.smtps},
                                std::tuple{"qmgr_user", &s.qmgr_user, &a.qmgr},
                                std::tuple{"smtpc_user", &s.smtpc_user, &a.smtpc}}) {
        auto found = lookup_user(key, *name, err);
        if (!found) return std::nullopt;
        // The shared group is the primary one, so that every file a child
        // creates (content, bounces, the socket) is the group's to read;
        // the account's own group stays as a supplementary one.
        *r = *found;
        r->groups = {a.group, r->gid};
        r->gid = a.group;
    }
    a.smtps_group = a.smtps.groups[1];
    if (a.smtps_group == a.group) {
        err = "server.smtps_user: the primary group of '" + s.smtps_user +
              "' is server.group; give it a group of its own (adduser --group), or SMTPC "
              "could write the content directories";
        return std::nullopt;
    }
    return a;
}

bool make_dirs(const smx::Config& cfg, const Accounts* accounts, std::string& err) {
    if (accounts) return make_dirs_as_root(cfg, *accounts, err);
    const std::string content = cfg.content_dir_abs();
    std::vector<std::string> dirs{cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(),
                                  cfg.quarantine_dir_abs(), content, cfg.run_dir_abs(),
                                  content + "/segments", cfg.maildrop_dir_abs(),
                                  cfg.maildrop_quarantine_dir_abs()};
    if (cfg.queue.cdb_hashed)
        for (int i = 0; i < 256; ++i) dirs.push_back(content + "/" + hashed_dir(i));
    for (const auto& d : dirs) {
        std::error_code ec;
        fs::create_directories(d, ec);
        if (ec || !fs::is_directory(d, ec)) {
            err = "cannot create " + d + ": " + (ec ? ec.message() : "not a directory");
            return false;
        }
    }
    return true;
}

namespace {

// May r, by owner, group and mode, do `what` (04 read, 01 search) to st?
bool may(const RunAs& r, const struct stat& st, mode_t what) {
    if (r.uid == 0) return true;
    if (st.st_uid == r.uid) return st.st_mode & (what << 6);
    const bool member = st.st_gid == r.gid ||
                        std::find(r.groups.begin(), r.groups.end(), st.st_gid) != r.groups.end();
    return st.st_mode & (member ? what << 3 : what);
}

bool has_acl(const fs::path& p) {
    return ::getxattr(p.c_str(), "system.posix_acl_access", nullptr, 0) > 0;
}

std::string describe(const struct stat& st) {
    const passwd* pw = ::getpwuid(st.st_uid);
    const group* gr = ::getgrgid(st.st_gid);
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string(mode) + " " + (pw ? pw->pw_name : std::to_string(st.st_uid)) + ":" +
           (gr ? gr->gr_name : std::to_string(st.st_gid));
}

// Search on every directory from / to dir (read on the last step when
// file); why not, else empty.
std::string unreachable(const RunAs& r, const std::string& child, const fs::path& path, bool file) {
    fs::path at;
    for (auto step = path.begin(); step != path.end(); ++step) {
        at /= *step;
        const bool last = std::next(step) == path.end();
        struct stat st;
        if (::stat(at.c_str(), &st) != 0 || has_acl(at)) continue;  // a missing one is made later
        const mode_t what = last && file ? 04 : 01;
        if (may(r, st, what)) continue;
        const std::string who = r.name + " (" + child + ")";
        if (what == 04)
            return who + " cannot read the config file " + at.string() + " (" + describe(st) +
                   "); make it readable to it, e.g. chgrp smx and chmod g+r";
        return who + " cannot pass through " + at.string() + " (" + describe(st) +
               ") on its way to " + path.string() + "; let it (chmod o+x " + at.string() +
               ") or use a directory it can reach";
    }
    return {};
}

} // namespace

bool check_reach(const smx::Config& cfg, const std::string& config_path, const Accounts& a,
                 std::string& err) {
    const std::vector<std::string> everyone{cfg.content_dir_abs(), cfg.run_dir_abs()};
    const std::vector<std::string> qmgr{cfg.spool_dir_abs(),      cfg.ibdb_dir_abs(),
                                        cfg.defedb_dir_abs(),     cfg.quarantine_dir_abs(),
                                        cfg.content_dir_abs(),    cfg.run_dir_abs()};
    for (auto [r, child, dirs] : {std::tuple{&a.smtps, "smx-smtps", &everyone},
                                  std::tuple{&a.qmgr, "smx-qmgr", &qmgr},
                                  std::tuple{&a.smtpc, "smx-smtpc", &everyone}}) {
        for (const auto& d : *dirs)
            if (err = unreachable(*r, child, d, false); !err.empty()) return false;
        if (!config_path.empty() &&
            !(err = unreachable(*r, child, fs::absolute(config_path), true)).empty())
            return false;
    }
    return true;
}

} // namespace smx::mcp
