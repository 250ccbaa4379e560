#include "libsm/lookup_table.hpp"

#include "libsm/domain.hpp"
#include "libsm/fd.hpp"
#include "libsm/table_db.hpp"
#include "libsm/table_follow.hpp"
#include "libsm/table_regex.hpp"
#include "libsm/table_text.hpp"

#include <db_cxx.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <unordered_map>

namespace smx::table {
namespace {

// texthash: is for short tables; a long one belongs in hash:. pcre: and
// regexp: are read whole and compiled, and each lookup tries every rule.
constexpr off_t max_text_table = 16 << 20;

std::string read_text(const std::string& spec, const std::string& type, const std::string& path) {
    struct stat st{};
    const smx::Fd fd = open_file(spec, path, st);
    if (st.st_size > max_text_table)
        throw TableError(spec + ": " + path + " is " + std::to_string(st.st_size) +
                         " bytes, over " + type + ":'s " + std::to_string(max_text_table) +
                         (type == "texthash" ? " (build it with `smx map build` and name it hash:)" : ""));
    std::string text;  // shrunk since fstat: what was there
    if (const int err = smx::read_up_to(fd.get(), static_cast<std::size_t>(st.st_size), text))
        throw TableError(spec + ": cannot read " + path + ": " + std::strerror(err));
    return text;
}

// Entries held in memory: texthash: and inline:. The first of a key given
// twice counts, as postmap keeps it.
class MemoryTable final : public Table {
public:
    MemoryTable(std::string spec, std::string_view text, const std::string& name) : Table(std::move(spec)) {
        try {
            parse_text(text, name, Syntax::table,
                       [this](Entry&& e) { entries_.try_emplace(std::move(e.key), std::move(e.value)); });
        } catch (const TextError& e) {
            throw TableError(this->spec() + ": " + e.what());
        }
    }
    Lookup find(std::string_view key) const override {
        const auto it = entries_.find(smx::lower(key));
        if (it == entries_.end()) return {};
        return {Status::found, it->second};
    }
    void each(const std::function<void(std::string_view, std::string_view)>& f) const override {
        for (const auto& [k, v] : entries_) f(k, v);
    }

private:
    std::unordered_map<std::string, std::string> entries_;
};

// inline:{ k1=v1, { k2 = v, w } }: the entries as table text, one a line.
std::string inline_text(const std::string& spec, std::string_view body) {
    while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
    while (!body.empty() && body.back() == ' ') body.remove_suffix(1);
    if (body.size() < 2 || body.front() != '{' || body.back() != '}')
        throw TableError(spec + ": expected inline:{ key=value, ... }");
    body = body.substr(1, body.size() - 2);
    std::string text;
    std::string item;
    int depth = 0;
    const auto add = [&] {
        std::string_view it = item;
        while (!it.empty() && (it.front() == ' ' || it.front() == '\t')) it.remove_prefix(1);
        while (!it.empty() && (it.back() == ' ' || it.back() == '\t')) it.remove_suffix(1);
        if (!it.empty() && it.front() == '{' && it.back() == '}') it = it.substr(1, it.size() - 2);
        if (it.find_first_not_of(" \t") == std::string_view::npos) {
            item.clear();
            return;
        }
        const auto eq = it.find('=');
        if (eq == std::string_view::npos)
            throw TableError(spec + ": \"" + std::string(it) + "\" is not key=value");
        std::string key(it.substr(0, eq));
        std::erase_if(key, [](char c) { return c == ' ' || c == '\t'; });
        std::string_view value = it.substr(eq + 1);
        while (!value.empty() && (value.front() == ' ' || value.front() == '{')) value.remove_prefix(1);
        while (!value.empty() && (value.back() == ' ' || value.back() == '}')) value.remove_suffix(1);
        text += key;
        text += ' ';
        text += value;
        text += '\n';
        item.clear();
    };
    for (const char c : body) {
        if (c == '\n' || c == '\r') throw TableError(spec + ": a line break in an inline table");
        if (c == '{') ++depth;
        if (c == '}' && --depth < 0) throw TableError(spec + ": unbalanced braces");
        if (c == ',' && depth == 0) {
            add();
            continue;
        }
        item += c;
    }
    if (depth != 0) throw TableError(spec + ": unbalanced braces");
    add();
    return text;
}

// What Berkeley DB said last on this thread.
thread_local std::string db_said;
void on_db_error(const DbEnv*, const char*, const char* msg) { db_said = msg ? msg : ""; }

// Without a value's NUL, as postmap stores it.
std::string_view stored(const Dbt& d) {
    std::string_view s(static_cast<const char*>(d.get_data()), d.get_size());
    if (!s.empty() && s.back() == '\0') s.remove_suffix(1);
    return s;
}

// hash: and btree:, read-only. The handle is opened with DB_THREAD, so
// sessions on several threads may look up at once; each get has its own
// result memory.
class DbTable final : public Table {
public:
    DbTable(std::string spec, const std::string& path, DBTYPE type)
        : Table(std::move(spec)), db_(std::make_unique<Db>(nullptr, DB_CXX_NO_EXCEPTIONS)) {
        struct stat st{};
        fd_ = open_file(this->spec(), path, st);
        size_ = st.st_size;
        check_length(path);
        // Berkeley DB opens by name: the name of the descriptor checked
        // above, so that a file swapped in since is not the one read.
        const std::string by_fd = "/proc/self/fd/" + std::to_string(fd_.get());
        report_errors(*db_);
        const int r = db_->open(nullptr, by_fd.c_str(), nullptr, type, DB_RDONLY | DB_THREAD, 0);
        if (r != 0) {
            std::string why = error_text(r);
            // Berkeley DB names the file as it was opened.
            for (auto at = why.find(by_fd); at != std::string::npos; at = why.find(by_fd))
                why.replace(at, by_fd.size(), path);
            db_->close(0);
            db_.reset();
            throw TableError(this->spec() + ": cannot open " + path + " as a " +
                             (type == DB_HASH ? "hash" : "btree") + " file: " + why);
        }
        nul_ = first_key_nul();
    }
    ~DbTable() override {
        if (db_) db_->close(0);
    }
    Lookup find(std::string_view key) const override {
        std::string k = smx::lower(key);
        // postmap stores keys with their NUL, as `smx map build` does; other
        // tools without. A file holds one kind (seen at open), so a miss is
        // one read, not two.
        if (nul_ != Nul::without) k.push_back('\0');
        Lookup l = get(k);
        if (l.status == Status::not_found && nul_ == Nul::unknown) {
            k.pop_back();
            l = get(k);
        }
        // Berkeley DB reads pages past the end of a file cut short under it
        // (a table rewritten in place, as postmap does) as empty: a miss
        // then is no answer.
        struct stat st{};
        if (l.status == Status::not_found && (::fstat(fd_.get(), &st) != 0 || st.st_size != size_))
            l.status = Status::failed;
        return l;
    }

private:
    // A file shorter than its metadata page says (cut short, or still being
    // written) would answer "not found" for what it lost.
    void check_length(const std::string& path) const {
        unsigned char meta[36];
        if (::pread(fd_.get(), meta, sizeof meta, 0) != static_cast<ssize_t>(sizeof meta))
            throw TableError(spec() + ": " + path + " is too short for a Berkeley DB file");
        const auto word = [&meta](std::size_t at, bool swap) {
            std::uint32_t v = 0;
            std::memcpy(&v, meta + at, sizeof v);
            return swap ? __builtin_bswap32(v) : v;
        };
        constexpr std::uint32_t hash_magic = 0x061561, btree_magic = 0x053162;
        const std::uint32_t magic = word(12, false);
        const bool swap = magic != hash_magic && magic != btree_magic;
        if (swap && word(12, true) != hash_magic && word(12, true) != btree_magic)
            return;  // not a hash or btree file: Berkeley DB's open says so
        const std::uint64_t page = word(20, swap);
        const std::uint64_t pages = std::uint64_t{word(32, swap)} + 1;
        if (page >= 512 && page <= 65536 && static_cast<std::uint64_t>(size_) < page * pages)
            throw TableError(spec() + ": " + path + " is cut short (" + std::to_string(size_) +
                             " of the " + std::to_string(page * pages) +
                             " bytes its header names): rebuild it with smx map build");
    }

    Lookup get(std::string& k) const {
        Dbt key(k.data(), static_cast<u_int32_t>(k.size()));
        Dbt value;
        value.set_flags(DB_DBT_MALLOC);
        const int r = db_->get(nullptr, &key, &value, 0);
        if (r == DB_NOTFOUND) return {};
        if (r != 0) return {Status::failed, {}};
        Lookup l{Status::found, std::string(stored(value))};
        std::free(value.get_data());
        return l;
    }

public:
    void each(const std::function<void(std::string_view, std::string_view)>& f) const override {
        Dbc* c = nullptr;
        if (const int r = db_->cursor(nullptr, &c, 0))
            throw TableError(spec() + ": cannot read: " + error_text(r));
        // Closed however the walk ends.
        const std::unique_ptr<Dbc, int (*)(Dbc*)> cursor(c, [](Dbc* d) { return d->close(); });
        Dbt key;
        Dbt value;
        key.set_flags(DB_DBT_REALLOC);
        value.set_flags(DB_DBT_REALLOC);
        const auto release = [&] {
            std::free(key.get_data());
            std::free(value.get_data());
        };
        int r = 0;
        try {
            while ((r = c->get(&key, &value, DB_NEXT)) == 0) f(stored(key), stored(value));
        } catch (...) {
            release();
            throw;
        }
        release();
        if (r != DB_NOTFOUND) throw TableError(spec() + ": cannot read: " + error_text(r));
    }

private:
    // Whether the file's keys end in a NUL: as its first key does.
    enum class Nul { unknown, with, without };
    Nul first_key_nul() const {
        Dbc* c = nullptr;
        if (db_->cursor(nullptr, &c, 0) != 0) return Nul::unknown;
        Dbt key, value;
        key.set_flags(DB_DBT_MALLOC);
        value.set_flags(DB_DBT_MALLOC);
        Nul n = Nul::unknown;
        if (c->get(&key, &value, DB_FIRST) == 0) {
            const auto* k = static_cast<const char*>(key.get_data());
            n = key.get_size() > 0 && k[key.get_size() - 1] == '\0' ? Nul::with : Nul::without;
            std::free(key.get_data());
            std::free(value.get_data());
        }
        c->close();
        return n;
    }

    smx::Fd fd_;    // the file Berkeley DB reads, kept to see it change under us
    off_t size_ = 0;  // its size when opened
    std::unique_ptr<Db> db_;
    Nul nul_ = Nul::unknown;
};

// spec's type and name; TableError for a spec no type takes. inline: is
// only split here, its entries parsed by inline_text.
std::pair<std::string, std::string> split_spec(const std::string& spec) {
    const auto colon = spec.find(':');
    if (colon == std::string::npos || colon == 0)
        throw TableError("\"" + spec + "\": expected type:name (hash:/etc/smx/access, texthash:..., inline:{...})");
    std::string type = spec.substr(0, colon);
    std::string name = spec.substr(colon + 1);
    if (type == "inline") return {type, name};
    if (type != "hash" && type != "btree" && type != "texthash" && type != "pcre" && type != "regexp")
        throw TableError(spec + ": unknown table type \"" + type +
                         "\" (hash, btree, texthash, inline, pcre or regexp)");
    if (name.empty() || name.front() != '/')
        throw TableError(spec + ": the file name must be an absolute path");
    return {type, name};
}

} // namespace

std::shared_ptr<const Table> open(const std::string& spec) {
    const auto [type, name] = split_spec(spec);
    if (type == "inline") return std::make_shared<MemoryTable>(spec, inline_text(spec, name), spec);
    if (type == "texthash")
        return follow(spec, name, [spec, path = name] {
            return std::make_shared<MemoryTable>(spec, read_text(spec, "texthash", path), path);
        });
    if (type == "pcre" || type == "regexp")
        return follow(spec, name, [spec, type = type, path = name] {
            return regex_table(spec, read_text(spec, type, path), path,
                               type == "pcre" ? Dialect::pcre : Dialect::regexp);
        });
    const DBTYPE kind = type == "hash" ? DB_HASH : DB_BTREE;
    return follow(spec, name + ".db", [spec, path = name + ".db", kind] {
        return std::make_shared<DbTable>(spec, path, kind);
    });
}

void check_spec(const std::string& spec) {
    const auto [type, name] = split_spec(spec);
    if (type == "inline") open(spec);  // its entries are all there is to check
}

smx::Fd open_file(const std::string& what, const std::string& path, struct stat& st) {
    smx::Fd fd(::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
    if (!fd)
        throw TableError(what + ": cannot open " + path + ": " +
                         (errno == ELOOP ? "it is a symbolic link" : std::strerror(errno)));
    if (::fstat(fd.get(), &st) != 0)
        throw TableError(what + ": cannot stat " + path + ": " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw TableError(what + ": " + path + " is not a regular file");
    return fd;
}

void Table::each(const std::function<void(std::string_view, std::string_view)>&) const {
    throw TableError(spec_ + ": this table cannot be listed");
}

void report_errors(Db& db) {
    db.set_errcall(on_db_error);
    db_said.clear();
}

std::string error_text(int r) {
    std::string s = db_strerror(r);
    if (!db_said.empty()) s += " (" + db_said + ")";
    db_said.clear();
    return s;
}

TableList TableList::open(const std::vector<std::string>& specs) {
    std::vector<std::shared_ptr<const Table>> tables;
    tables.reserve(specs.size());
    for (const auto& s : specs) tables.push_back(smx::table::open(s));
    return TableList(std::move(tables));
}

Lookup TableList::find(std::string_view key, bool partial) const {
    for (const auto& t : tables_) {
        if (partial && t->pattern()) continue;
        Lookup l = t->find(key);
        if (l.status != Status::not_found) return l;
    }
    return {};
}

Lookup TableList::find_first(const std::vector<std::string>& keys) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
        Lookup l = find(keys[i], i > 0);
        if (l.status != Status::not_found) return l;
    }
    return {};
}

std::vector<std::string> domain_keys(std::string_view domain, bool dotted_parents) {
    std::vector<std::string> keys;
    std::string d = smx::lower(domain);
    while (!d.empty() && d.back() == '.') d.pop_back();
    if (d.empty()) return keys;
    keys.push_back(d);
    for (auto dot = d.find('.'); dot != std::string::npos; dot = d.find('.', dot + 1)) {
        if (dot + 1 >= d.size()) break;
        keys.push_back(dotted_parents ? d.substr(dot) : d.substr(dot + 1));
    }
    return keys;
}

std::vector<std::string> address_keys(std::string_view addr, std::string_view delimiters,
                                      Order order) {
    std::vector<std::string> keys;
    if (addr.empty()) {
        if (order == Order::access) keys.emplace_back("<>");
        return keys;
    }
    const std::string a = smx::lower(addr);
    const auto at = a.rfind('@');
    const std::string local = a.substr(0, at);
    const std::string domain = at == std::string::npos ? std::string() : a.substr(at + 1);
    std::string base = local;  // the local part without its extension
    if (!delimiters.empty()) {
        const auto d = local.find_first_of(delimiters);
        if (d != std::string::npos && d > 0) base = local.substr(0, d);
    }
    const auto with_domain = [&](const std::string& l) { return domain.empty() ? l : l + "@" + domain; };
    keys.push_back(with_domain(local));
    if (base != local) keys.push_back(with_domain(base));
    switch (order) {
    case Order::address:
        if (!domain.empty()) keys.push_back("@" + domain);
        break;
    case Order::access:
        for (auto& k : domain_keys(domain, false)) keys.push_back(std::move(k));
        keys.push_back(local + "@");
        if (base != local) keys.push_back(base + "@");
        break;
    case Order::transport:
        for (auto& k : domain_keys(domain, true)) keys.push_back(std::move(k));
        keys.emplace_back("*");
        break;
    }
    return keys;
}

std::vector<std::string> client_address_keys(std::string_view ip) {
    std::vector<std::string> keys;
    std::string a = smx::lower(ip);
    const char sep = a.find(':') != std::string::npos ? ':' : '.';
    while (!a.empty()) {
        keys.push_back(a);
        const auto p = a.rfind(sep);
        if (p == std::string::npos) break;
        a.resize(p);
        // "2001:db8::" stops where the compressed zeros are
        while (!a.empty() && a.back() == sep) a.pop_back();
    }
    return keys;
}

} // namespace smx::table
