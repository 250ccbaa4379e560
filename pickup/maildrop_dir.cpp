#include "pickup/maildrop_dir.hpp"

#include "libsm/content_file.hpp"
#include "libsm/content_trust.hpp"
#include "libsm/ids.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace smx::pickup {
namespace {

constexpr std::size_t chunk = 64 * 1024;
// A temporary smx-postdrop left: it was killed, or its user stopped feeding it.
constexpr auto stale_after = std::chrono::hours(1);

std::string errno_text(int e = errno) { return std::strerror(e); }

smx::Fd open_dir(const std::string& path) {
    smx::Fd fd(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throw std::runtime_error("cannot open " + path + ": " + errno_text());
    return fd;
}

// pread of exactly n bytes at off.
bool read_at(int fd, std::uint64_t off, char* p, std::size_t n) {
    while (n > 0) {
        const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(off));
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<std::size_t>(got);
        off += static_cast<std::uint64_t>(got);
    }
    return true;
}

// A login name that is safe in a header comment, or empty.
std::string login_of(std::uint32_t uid) {
    const passwd* pw = ::getpwuid(uid);
    if (!pw) return {};
    const std::string n = pw->pw_name;
    const bool plain = std::all_of(n.begin(), n.end(), [](char c) {
        return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '.' || c == '_' || c == '-';
    });
    return plain && n.size() <= 64 ? n : std::string();
}

} // namespace

MaildropDir::MaildropDir(const smx::Config& cfg)
    : cfg_(cfg), max_size_(cfg.server.max_message_size), path_(cfg.maildrop_dir_abs()),
      quarantine_path_(cfg.maildrop_quarantine_dir_abs()), content_(cfg.content_dir_abs()),
      dir_(open_dir(path_)), quarantine_(open_dir(quarantine_path_)) {}

MaildropDir::Listing MaildropDir::list() {
    Listing out;
    DIR* d = ::fdopendir(::fcntl(dir_.get(), F_DUPFD_CLOEXEC, 0));
    if (!d) throw std::runtime_error("cannot list " + path_ + ": " + errno_text());
    struct Closedir {
        void operator()(DIR* p) const { ::closedir(p); }
    };
    std::unique_ptr<DIR, Closedir> guard(d);
    // The copy shares dir_'s offset, which the last listing left at the end.
    ::rewinddir(d);
    std::vector<std::pair<std::int64_t, std::string>> ready;
    const auto stale = std::chrono::system_clock::now() - stale_after;
    while (const dirent* e = ::readdir(d)) {
        const std::string name = e->d_name;
        if (name == "." || name == "..") continue;
        struct stat st;
        if (::fstatat(dir_.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
        if (!smx::maildrop::valid_name(name)) {
            quarantine(name, "not a maildrop file name");
            continue;
        }
        switch (name.front()) {
        case smx::maildrop::ready_prefix: ready.emplace_back(st.st_mtime, name); break;
        case smx::maildrop::committing_prefix: out.committing.push_back(name); break;
        default:
            if (std::chrono::system_clock::from_time_t(st.st_mtime) < stale &&
                ::unlinkat(dir_.get(), name.c_str(), 0) == 0)
                spdlog::warn("maildrop: removed {}, a file smx-postdrop began more than an hour "
                             "ago and never finished",
                             name);
        }
    }
    std::sort(ready.begin(), ready.end());
    for (auto& [_, n] : ready) out.ready.push_back(std::move(n));
    return out;
}

std::optional<MaildropDir::Checked> MaildropDir::check(int fd, std::string& why) const {
    struct stat st;
    if (::fstat(fd, &st) != 0) {
        why = "fstat: " + errno_text();
        return std::nullopt;
    }
    if (!S_ISREG(st.st_mode)) why = "not a regular file";
    else if (st.st_nlink != 1) why = std::to_string(st.st_nlink) + " hard links";
    const auto size = static_cast<std::uint64_t>(st.st_size);
    if (why.empty() &&
        size > smx::maildrop::prefix_size + smx::maildrop::max_fields() + max_size_)
        why = "larger (" + std::to_string(size) + " bytes) than any file of a message within "
              "server.max_message_size";
    std::string prefix(smx::maildrop::prefix_size, '\0');
    if (why.empty() && (size < prefix.size() || !read_at(fd, 0, prefix.data(), prefix.size())))
        why = "shorter than a maildrop file's header";
    if (!why.empty()) return std::nullopt;
    const auto n = smx::maildrop::fields_length(prefix, why);
    if (!n) return std::nullopt;
    if (prefix.size() + *n > size) {
        why = "cut short within its envelope";
        return std::nullopt;
    }
    std::string fields(*n, '\0');
    if (!read_at(fd, prefix.size(), fields.data(), fields.size())) {
        why = "cannot read its envelope: " + errno_text();
        return std::nullopt;
    }
    auto env = smx::maildrop::decode(fields, smx::maildrop::Kind::file, why);
    if (!env) return std::nullopt;
    const std::uint64_t at = prefix.size() + *n;
    // Only smx-postdrop, run by that user, can have made it so.
    if (st.st_uid != env->uid)
        why = "owned by uid " + std::to_string(st.st_uid) + " but says uid " +
              std::to_string(env->uid);
    else if (size - at != env->content_size)
        why = "its content is " + std::to_string(size - at) + " bytes, its envelope says " +
              std::to_string(env->content_size);
    else if (env->content_size > max_size_)
        why = "message of " + std::to_string(env->content_size) +
              " bytes exceeds server.max_message_size";
    if (!why.empty()) return std::nullopt;
    return Checked{std::move(*env), at};
}

std::string MaildropDir::received(const Taken& t) const {
    const std::string login = login_of(t.env.uid);
    return "Received: by " + cfg_.server.hostname + " (smx, from userid " +
           std::to_string(t.env.uid) + (login.empty() ? "" : " (" + login + ")") + ")\r\n\tid " +
           t.id + "; " + smx::rfc5322_date(smx::now_us()) + "\r\n";
}

MaildropDir::Copy MaildropDir::copy(int fd, const Checked& c, Taken& t, std::string& why) const {
    const std::string path = smx::content::file_path(content_, t.id, cfg_.queue.cdb_hashed);
    int out = -1;
    int err = smx::content::create(path, out);
    if (err) {
        why = "cannot create content file " + path + ": " + errno_text(err);
        return Copy::failed;
    }
    const std::string header = received(t);
    err = smx::content::write_all(out, header);
    smx::maildrop::ContentCheck check;
    std::string buf(chunk, '\0');
    bool unreadable = false;
    for (std::uint64_t at = c.content_at, left = c.env.content_size; !err && left > 0;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk));
        if (!read_at(fd, at, buf.data(), n)) {
            unreadable = true;
            break;
        }
        check.feed({buf.data(), n});
        err = smx::content::write_all(out, {buf.data(), n});
        at += n;
        left -= n;
    }
    const std::string bad = unreadable ? "cannot read its content" : check.finish();
    // Synced, name and all, before the maildrop file says p<id>: after a
    // crash a p file whose content file is missing means QMGR removed it.
    err = smx::content::close_created(out, err ? err : bad.empty() ? 0 : EBADMSG, path, true, true);
    if (!bad.empty()) {
        why = bad;
        return Copy::bad_file;
    }
    if (err) {
        why = "cannot write content file " + path + ": " + errno_text(err);
        return Copy::failed;
    }
    t.size = header.size() + c.env.content_size;
    t.eight_bit = check.eight_bit();
    return Copy::ok;
}

Outcome MaildropDir::take(const std::string& name) {
    Outcome o;
    smx::Fd fd(::openat(dir_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd) {
        if (errno == ENOENT) return o;  // gone meanwhile
        quarantine(name, errno == ELOOP ? "a symbolic link" : "cannot open: " + errno_text());
        o.kind = Outcome::Kind::quarantined;
        return o;
    }
    std::string why;
    const auto c = check(fd.get(), why);
    Taken t;
    t.ready_name = name;
    t.id = smx::new_ta_id();
    Copy copied = Copy::bad_file;
    if (c) {
        t.env = c->env;
        copied = copy(fd.get(), *c, t, why);
    }
    if (copied == Copy::failed) {
        // A content file we could not write is a fact about us, not the file.
        o.kind = Outcome::Kind::failed;
        o.why = why;
        return o;
    }
    if (copied == Copy::bad_file) {
        quarantine(name, why);
        o.kind = Outcome::Kind::quarantined;
        return o;
    }
    const std::string committing = smx::maildrop::committing_prefix + t.id;
    if (::renameat(dir_.get(), name.c_str(), dir_.get(), committing.c_str()) != 0) {
        o.kind = Outcome::Kind::failed;
        o.why = "cannot rename " + name + " to " + committing + ": " + errno_text();
        smx::content::remove(content_, t.id, cfg_.queue.cdb_hashed);
        return o;
    }
    o.kind = Outcome::Kind::taken;
    o.taken = std::move(t);
    return o;
}

Outcome MaildropDir::resume(const std::string& name) {
    Outcome o;
    Taken t;
    t.id = name.substr(1);
    t.ready_name = smx::maildrop::ready_prefix + smx::maildrop::random_part();
    smx::Fd fd(::openat(dir_.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd && errno == ENOENT) return o;  // gone meanwhile
    std::string why = fd ? "" : errno == ELOOP ? "a symbolic link" : "cannot open: " + errno_text();
    auto c = fd ? check(fd.get(), why) : std::nullopt;
    if (!c) {
        quarantine(name, why);
        o.kind = Outcome::Kind::quarantined;
        return o;
    }
    t.env = c->env;
    int content = -1;
    std::uint64_t size = 0;
    std::string bad;
    const smx::content::Expect ours{::geteuid(), ::geteuid(),
                                   c->env.content_size + smx::maildrop::max_fields(), false};
    const int err = smx::content::open_read(content_, t.id, cfg_.queue.cdb_hashed, ours, content,
                                           size, bad);
    if (err == ENOENT) {
        // Only QMGR removes it, once every recipient is done.
        done(t);
        o.kind = Outcome::Kind::done;
        o.why = t.id + ": content file gone: the transaction was committed and is done";
        return o;
    }
    if (err) {
        quarantine(name, "content file " + t.id + ": " + bad);
        o.kind = Outcome::Kind::quarantined;
        return o;
    }
    ::close(content);
    smx::maildrop::ContentCheck check;
    std::string buf(chunk, '\0');
    for (std::uint64_t at = c->content_at, left = c->env.content_size; left > 0;) {
        const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk));
        if (!read_at(fd.get(), at, buf.data(), n)) break;
        check.feed({buf.data(), n});
        at += n;
        left -= n;
    }
    t.size = size;
    t.eight_bit = check.eight_bit();
    t.resumed = true;
    o.kind = Outcome::Kind::taken;
    o.taken = std::move(t);
    return o;
}

int MaildropDir::open_content(const Taken& t, std::string& why) const {
    int fd = -1;
    std::uint64_t size = 0;
    const smx::content::Expect ours{::geteuid(), ::geteuid(), t.size, true};
    const int err = smx::content::open_read(content_, t.id, cfg_.queue.cdb_hashed, ours, fd, size,
                                           why);
    return err ? -1 : fd;
}

std::string MaildropDir::replace_content(Taken& t, const std::string& head,
                                         const std::optional<std::string>& body,
                                         std::uint64_t body_at) {
    const std::string path = smx::content::file_path(content_, t.id, cfg_.queue.cdb_hashed);
    // As SMTPS names its edited copies: a crash's leftover is removed at its start.
    const std::string tmp = path + ".tmp";
    std::string why;
    smx::Fd old(open_content(t, why));
    if (!old) return "cannot open content file " + t.id + ": " + why;
    int out = -1;
    int err = smx::content::open_tmp(tmp, out);
    if (err) return "cannot create " + tmp + ": " + errno_text(err);
    const auto eight = [](std::string_view s) {
        return std::any_of(s.begin(), s.end(), [](char c) { return (c & 0x80) != 0; });
    };
    bool eight_bit = t.eight_bit || eight(head);
    std::uint64_t size = head.size();
    err = smx::content::write_all(out, head);
    if (body) {
        eight_bit = eight_bit || eight(*body);
        size += body->size();
        if (!err) err = smx::content::write_all(out, *body);
    } else {
        std::string buf(chunk, '\0');
        for (std::uint64_t at = body_at; !err && at < t.size;) {
            const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(t.size - at, chunk));
            errno = 0;
            if (!read_at(old.get(), at, buf.data(), n)) err = errno ? errno : EIO;
            else err = smx::content::write_all(out, {buf.data(), n});
            at += n;
            size += n;
        }
    }
    // As the copy: synced, name and all, before the commit names it.
    err = smx::content::finish_tmp(out, err, tmp, path, true);
    if (err) return "cannot write content file " + path + ": " + errno_text(err);
    t.size = size;
    t.eight_bit = eight_bit;
    return {};
}

void MaildropDir::done(const Taken& t) {
    const std::string name = smx::maildrop::committing_prefix + t.id;
    if (::unlinkat(dir_.get(), name.c_str(), 0) != 0 && errno != ENOENT)
        spdlog::error("{}: cannot remove {}/{}: {}", t.id, path_, name, errno_text());
}

void MaildropDir::give_back(const Taken& t) {
    smx::content::remove(content_, t.id, cfg_.queue.cdb_hashed);
    const std::string name = smx::maildrop::committing_prefix + t.id;
    if (::renameat(dir_.get(), name.c_str(), dir_.get(), t.ready_name.c_str()) != 0)
        spdlog::error("{}: cannot rename {}/{} back to {}: {}", t.id, path_, name, t.ready_name,
                      errno_text());
}

void MaildropDir::refused(const Taken& t, const std::string& why) {
    smx::content::remove(content_, t.id, cfg_.queue.cdb_hashed);
    quarantine(smx::maildrop::committing_prefix + t.id, why);
}

void MaildropDir::quarantine(const std::string& name, const std::string& why) {
    // The name moves, never through it: a link, a FIFO or a directory goes as it is.
    if (::renameat(dir_.get(), name.c_str(), quarantine_.get(), name.c_str()) != 0) {
        spdlog::error("maildrop file {}: {}; cannot move it to {}: {}", name, why,
                      quarantine_path_, errno_text());
        return;
    }
    spdlog::warn("maildrop file {}: {}; moved to {}/{}", name, why, quarantine_path_, name);
}

} // namespace smx::pickup
