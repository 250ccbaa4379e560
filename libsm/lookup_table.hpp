// Lookup tables, named as postfix names them ("type:name"):
//   hash:/etc/smx/access   Berkeley DB hash file /etc/smx/access.db, built by
//                          `smx map build /etc/smx/access` (postmap's files
//                          read as well: keys and values may end in a NUL)
//   btree:/etc/smx/access  the same as a B-tree
//   texthash:/etc/smx/x    the text itself, read into memory when opened
//   inline:{ k1=v1, k2=v2 } entries written in the config (a value with a
//                          comma in braces: { k = {v, w} })
//   pcre:/etc/smx/checks   regular expressions, pcre_table(5) (table_regex.hpp)
//   regexp:/etc/smx/checks the same in POSIX syntax, regexp_table(5)
// Keys are folded to lower case when built and when looked up (pcre: and
// regexp: match the key as given, case-insensitive by default). A lookup
// that cannot answer (a read error, a corrupt file) says failed: callers
// answer with a temporary failure, never as if the key were absent.
#pragma once

#include "libsm/fd.hpp"

#include <sys/stat.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace smx::table {

// A table that cannot be opened: names the table and why.
struct TableError : std::runtime_error {
    using std::runtime_error::runtime_error;
};

enum class Status { found, not_found, failed };

struct Lookup {
    Status status = Status::not_found;
    std::string value;  // when found
    bool found() const { return status == Status::found; }
    bool failed() const { return status == Status::failed; }
};

class Table {
public:
    explicit Table(std::string spec) : spec_(std::move(spec)) {}
    virtual ~Table() = default;
    Table(const Table&) = delete;
    Table& operator=(const Table&) = delete;

    // key in any case. Safe to call from several threads at once.
    virtual Lookup find(std::string_view key) const = 0;
    // "hash:/etc/smx/access", as configured.
    const std::string& spec() const { return spec_; }
    // A table of patterns (pcre:, regexp:): asked only for a whole key, not
    // for the parts an access(5) search tries after it (postfix skips its
    // pattern tables for "partial" keys the same way).
    virtual bool pattern() const { return false; }
    // Every entry, in the table's own order (`smx map dump`); keys as
    // stored (lower case), without postmap's NULs. TableError if the table
    // cannot be read to its end.
    virtual void each(const std::function<void(std::string_view key, std::string_view value)>& f) const;

private:
    const std::string spec_;
};

// Opens spec; throws TableError ("hash:/etc/smx/access: cannot open
// /etc/smx/access.db: No such file or directory"). Files are opened without
// following a symbolic link in their last component and must be regular.
//
// A hash:, btree: or texthash: table follows its file: a lookup at most once
// a second compares the file's identity (device, inode, size, modification
// time) with that of the one open, and when it differs opens the new one
// and answers from it (a rebuild by `smx map build` takes effect within a
// second, without a reload). While the new file cannot be opened, lookups
// fail (a temporary failure: never the old answers as if nothing happened,
// never "not found") and the error is logged once.
std::shared_ptr<const Table> open(const std::string& spec);

// spec's type and name are well formed (a known type, an absolute path, an
// inline table that parses), without opening a file: the check at config
// load. Throws TableError as open does.
void check_spec(const std::string& spec);

// path opened for reading as tables are: not through a symbolic link in its
// last component, without blocking on a FIFO, a regular file (fstat into
// st). Throws TableError "<what>: cannot open <path>: ...".
smx::Fd open_file(const std::string& what, const std::string& path, struct stat& st);

// The tables of one config key, searched in order: the first that has a
// key answers. A table that fails before one has answered makes the search
// fail (a later table's answer might not be the one meant).
class TableList {
public:
    TableList() = default;
    explicit TableList(std::vector<std::shared_ptr<const Table>> tables)
        : tables_(std::move(tables)) {}
    // Opens each of specs (TableError from the first that cannot be).
    static TableList open(const std::vector<std::string>& specs);

    bool empty() const { return tables_.empty(); }
    // partial: key is one that a search order makes from a whole one (a
    // parent domain, "user@"): pattern tables are not asked.
    Lookup find(std::string_view key, bool partial = false) const;
    // The first key of keys, in order, that a table has (each key through
    // every table before the next key, as postfix searches); keys after
    // the first are partial.
    Lookup find_first(const std::vector<std::string>& keys) const;

private:
    std::vector<std::shared_ptr<const Table>> tables_;
};

// postfix's search orders (access(5), virtual(5), transport(5)). addr is an
// envelope address; delimiters: recipient_delimiter's characters (empty:
// no extensions). Each list is in lookup order, lower case; the first key
// is the whole one, the others partial (TableList::find).
enum class Order {
    // user+ext@domain, user@domain, domain, parent domains, user+ext@, user@
    // ("<>" for the null address)
    access,
    // user+ext@domain, user@domain, @domain (virtual_alias_maps,
    // relay_recipient_maps, canonical maps, sender-dependent maps)
    address,
    // user+ext@domain, user@domain, domain, .parent domains, *
    transport,
};
std::vector<std::string> address_keys(std::string_view addr, std::string_view delimiters,
                                      Order order);
// A host name: the name, then each parent ("a.b.c": "a.b.c", "b.c", "c";
// with dots: "a.b.c", ".b.c", ".c").
std::vector<std::string> domain_keys(std::string_view domain, bool dotted_parents);
// A client address as access(5) matches it: the address, then its networks
// by dropping octets ("1.2.3.4", "1.2.3", "1.2", "1"; IPv6 by dropping
// ":"-separated parts).
std::vector<std::string> client_address_keys(std::string_view ip);

} // namespace smx::table
