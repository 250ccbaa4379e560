#include "libsm/table_build.hpp"

#include "libsm/fd.hpp"
#include "libsm/lookup_table.hpp"
#include "libsm/table_db.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>

namespace smx::table {
namespace {

std::string errno_text() { return std::strerror(errno); }

// The cache of a build: what bounds its memory, whatever the table's size.
// Without size hints (nelem, ffactor) a hash table grows by splitting one
// bucket at a time, so its writes stay near one another and a cache of a
// fraction of the file does: a million entries (an 80 MB file) build in
// about 1.2 s of CPU with this, in 51 MB (docs/tables.md, Speed). Sized for
// the whole table at the start, the same build writes all over the file and
// pages it out and in: three times the CPU once the file outgrows the cache.
constexpr std::uint32_t build_cache = 32u << 20;

// Physical lines of source, read a buffer at a time: memory is the buffer
// and one line (at most max_line and a little), whatever the file's size.
class LineReader {
public:
    LineReader(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
    // The next line without its '\n'; false at the end of the file.
    bool next(std::string_view& line) {
        for (;;) {
            const auto nl = buf_.find('\n', pos_);
            if (nl != std::string::npos) {
                line = std::string_view(buf_).substr(pos_, nl - pos_);
                pos_ = nl + 1;
                ++lines_;
                return true;
            }
            buf_.erase(0, pos_);
            pos_ = 0;
            // White space around it, which the parser trims, on top.
            if (buf_.size() > max_line + slack)
                throw TextError(name_ + ", line " + std::to_string(lines_ + 1) +
                                ": a line longer than " + std::to_string(max_line) + " bytes");
            const std::size_t have = buf_.size();
            buf_.resize(have + chunk);
            const ssize_t n = ::read(fd_, buf_.data() + have, chunk);
            if (n < 0 && errno == EINTR) {
                buf_.resize(have);
                continue;
            }
            if (n < 0) throw TableError("cannot read " + name_ + ": " + errno_text());
            buf_.resize(have + static_cast<std::size_t>(n));
            if (n == 0) {
                if (buf_.empty()) return false;
                last_ = std::move(buf_);  // the last line, without a '\n'
                buf_.clear();
                line = last_;
                ++lines_;
                return true;
            }
        }
    }

private:
    static constexpr std::size_t chunk = 256 * 1024;
    static constexpr std::size_t slack = 4096;
    int fd_;
    std::string name_;
    std::string buf_;
    std::string last_;
    std::size_t pos_ = 0;
    unsigned lines_ = 0;
};

// Every entry of the file open on fd, from its start.
void each_entry(int fd, const std::string& name, Syntax syntax,
                const std::function<void(Entry&&)>& entry) {
    if (::lseek(fd, 0, SEEK_SET) != 0) throw TableError("cannot read " + name + ": " + errno_text());
    LineReader reader(fd, name);
    TextParser parser(name, syntax, entry);
    std::string_view line;
    while (reader.next(line)) parser.line(line);
    parser.finish();
}

// A name beside target no one else picks: ".NAME.XXXXXXXX" in its directory.
std::string temporary_name(const std::string& target) {
    unsigned char r[6];
    if (::getrandom(r, sizeof r, 0) != static_cast<ssize_t>(sizeof r))
        throw TableError("getrandom: " + errno_text());
    static constexpr char hex[] = "0123456789abcdef";
    std::string suffix;
    for (const unsigned char c : r) {
        suffix += hex[c >> 4];
        suffix += hex[c & 15];
    }
    const auto slash = target.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : target.substr(0, slash + 1);
    return dir + "." + target.substr(slash + 1) + "." + suffix;
}

// The file being written: removed unless it was renamed into place.
struct Temporary {
    std::string path;
    bool kept = false;
    ~Temporary() {
        if (!path.empty() && !kept) ::unlink(path.c_str());
    }
};

// A Db handle closed (so flushed) once, whatever happens after.
struct Handle {
    Db db{nullptr, DB_CXX_NO_EXCEPTIONS};
    bool open = false;
    ~Handle() {
        if (open) db.close(0);
    }
    int close() {
        open = false;
        return db.close(0);
    }
};

[[noreturn]] void db_fail(const std::string& what, int r) {
    throw TableError(what + ": " + error_text(r));
}

void sync_path(const std::string& path, int flags, const mode_t* mode, const struct stat* owner) {
    const Fd fd(::open(path.c_str(), flags | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) throw TableError("cannot open " + path + ": " + errno_text());
    if (mode && ::fchmod(fd.get(), *mode) != 0)
        throw TableError("cannot set the mode of " + path + ": " + errno_text());
    if (owner && ::fchown(fd.get(), owner->st_uid, owner->st_gid) != 0)
        throw TableError("cannot set the owner of " + path + ": " + errno_text());
    if (::fsync(fd.get()) != 0) throw TableError("cannot sync " + path + ": " + errno_text());
}

} // namespace

BuildResult build(const std::string& source, DbKind kind, Syntax syntax,
                  const std::function<void(const std::string&)>& warn) {
    struct stat st{};
    const Fd in = open_file(source, source, st);
    const std::string target = source + ".db";
    Temporary tmp{temporary_name(target)};

    Handle h;
    report_errors(h.db);
    if (const int r = h.db.set_cachesize(0, build_cache, 1)) db_fail(source, r);
    // O_EXCL: a file or link someone put at the name is never written through.
    if (const int r = h.db.open(nullptr, tmp.path.c_str(), nullptr,
                                kind == DbKind::hash ? DB_HASH : DB_BTREE, DB_CREATE | DB_EXCL,
                                0600))
        db_fail("cannot create " + tmp.path, r);
    h.open = true;

    BuildResult result;
    std::map<std::string, unsigned> repeated;  // up to max_duplicate_warnings: key, its line
    std::vector<std::pair<std::string, unsigned>> duplicates;
    each_entry(in.get(), source, syntax, [&](Entry&& e) {
        std::string key = std::move(e.key);
        key.push_back('\0');
        std::string value = std::move(e.value);
        value.push_back('\0');
        Dbt k(key.data(), static_cast<u_int32_t>(key.size()));
        Dbt v(value.data(), static_cast<u_int32_t>(value.size()));
        const int r = h.db.put(nullptr, &k, &v, DB_NOOVERWRITE);
        if (r == DB_KEYEXIST) {
            if (++result.duplicates <= max_duplicate_warnings) {
                key.pop_back();
                duplicates.emplace_back(key, e.line);
                repeated.emplace(std::move(key), 0);
            }
            return;
        }
        if (r != 0) db_fail("cannot write " + tmp.path, r);
        ++result.entries;
    });
    if (const int r = h.close()) db_fail("cannot write " + tmp.path, r);

    // Where each repeated key was first: looked for again only when there
    // are any, so that a build holds no line numbers.
    if (!repeated.empty()) {
        each_entry(in.get(), source, syntax, [&](Entry&& e) {
            const auto it = repeated.find(e.key);
            if (it != repeated.end() && it->second == 0) it->second = e.line;
        });
        for (const auto& [key, line] : duplicates)
            warn(source + ", line " + std::to_string(line) + ": duplicate entry \"" + key +
                 "\" (first at line " + std::to_string(repeated[key]) + "); ignored");
        if (result.duplicates > duplicates.size())
            warn(source + ": " + std::to_string(result.duplicates - duplicates.size()) +
                 " more duplicate entries ignored");
    }

    const mode_t mode = st.st_mode & 07777;
    sync_path(tmp.path, O_RDONLY, &mode, ::geteuid() == 0 ? &st : nullptr);
    if (::rename(tmp.path.c_str(), target.c_str()) != 0)
        throw TableError("cannot rename " + tmp.path + " to " + target + ": " + errno_text());
    tmp.kept = true;
    const auto slash = target.rfind('/');
    sync_path(slash == std::string::npos ? "." : slash == 0 ? "/" : target.substr(0, slash),
              O_RDONLY | O_DIRECTORY, nullptr, nullptr);
    return result;
}

std::optional<Buildable> buildable(const std::string& spec) {
    for (const auto& [prefix, kind] : {std::pair{"hash:", DbKind::hash}, std::pair{"btree:", DbKind::btree}})
        if (spec.starts_with(prefix)) return Buildable{kind, spec.substr(std::string_view(prefix).size())};
    return std::nullopt;
}

} // namespace smx::table
