#include "qmgr/defedb.hpp"
#include "qmgr/quarantine.hpp"

#include "libsm/ids.hpp"
#include "qmgr/defedb_record.hpp"

#include <db_cxx.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <string_view>

// Durability of each kind of commit. put_many/put_deferred commit with a
// synchronous log flush: the IBDB records "moved to DEFEDB" right after, and
// from then on DEFEDB is the only copy of the envelope. Everything else
// commits with DB_TXN_WRITE_NOSYNC (the log reaches the OS at commit, so it
// survives a QMGR crash; the next synchronous commit or checkpoint flushes it
// to disk): losing one of them in an OS crash is harmless, exactly like the
// IBDB's completion records —
//   remove after delivery: the recipient is delivered again (at least once);
//   update after a failure: one attempt fewer counted, retried sooner;
//   due()'s lease: the recipients are due again, which is what we want;
//   flush, hold, release, delete: the operator sees it undone and repeats it.
// Concurrent synchronous commits from QMGR's worker threads share one log
// flush in Berkeley DB, and put_many() batches many recipients in one.

namespace smx::qmgr {
namespace {

using namespace defedb;

constexpr int max_deadlock_retries = 100;
constexpr std::size_t scan_chunk = 1000;  // records per short read transaction
// Less free space than this when open() fails: blame the disk, not the DEFEDB.
constexpr std::uintmax_t disk_full_below = 1 << 20;
// What recovery writes is bounded for the emergency reserve (disk_space.hpp):
// log files of 1 MiB, each written whole when it is made (recovery zeroes
// the rest of the last one, which in a sparse file takes new blocks, up to
// a file's size: 10 MiB by default), and a checkpoint whenever 2 MiB of log
// were written since the last, so that recovery redoes at most about that
// much and adds at most the pages it touched (up to 1.2 MiB measured; every
// 4 MiB: 1.8 MiB). The cost, defedb-unit's 100,000 recipients stored with
// put_many of 1000, interleaved: 1.7-2.1 s, against 1.2-1.4 s with 10 MiB
// sparse log files and the minute's checkpoint only (1.9-2.3 s every 1 MiB).
constexpr u_int32_t log_file_size = 1 << 20;
constexpr u_int32_t checkpoint_every_kib = 2048;

// Recipients added (+) or removed (-) by the transaction running on this
// thread; Impl::txn() adds it to the count once the transaction commits.
thread_local std::int64_t txn_count_delta = 0;

// Close may run after spdlog's shutdown (QMGR's Defedb outlives it), and a
// checkpoint that fails there (disk full) must not log into a dropped logger.
void log_error(const std::string& what) {
    if (auto* log = spdlog::default_logger_raw()) log->error("{}", what);
}

// Berkeley DB's own diagnostics; the last one also goes into open()'s error.
thread_local std::string last_db_message;
void db_errcall(const DbEnv*, const char*, const char* msg) {
    last_db_message = msg;
    log_error(std::string("defedb: ") + msg);
}

// A Dbt Berkeley DB reads from (our memory).
struct In : Dbt {
    explicit In(const std::string& s) : Dbt(const_cast<char*>(s.data()), static_cast<u_int32_t>(s.size())) {}
};

// A Dbt Berkeley DB writes into (realloc'd memory, required with DB_THREAD).
struct Out : Dbt {
    Out() { set_flags(DB_DBT_REALLOC); }
    ~Out() { std::free(get_data()); }
    Out(const Out&) = delete;
    Out& operator=(const Out&) = delete;
    // Sets the bytes a DB_SET_RANGE search starts from.
    void assign(std::string_view s) {
        void* m = std::realloc(get_data(), s.size() + 1);
        if (!m) throw std::bad_alloc();
        std::memcpy(m, s.data(), s.size());
        set_data(m);
        set_size(static_cast<u_int32_t>(s.size()));
    }
    std::string_view view() const { return {static_cast<const char*>(get_data()), get_size()}; }
};

struct Cursor {
    Dbc* c = nullptr;
    Cursor(Db& db, DbTxn* t) { db.cursor(t, &c, 0); }
    ~Cursor() {
        try {
            c->close();
        } catch (const DbException&) {
            // The transaction is aborted or fails to commit anyway.
        }
    }
    Cursor(const Cursor&) = delete;
    Cursor& operator=(const Cursor&) = delete;
    Dbc* operator->() const { return c; }
};

DefedbError to_error(const DbException& e) {
    return DefedbError(std::string("defedb: ") + e.what(), e.get_errno() == DB_RUNRECOVERY);
}

} // namespace

struct Defedb::Impl {
    std::unique_ptr<DbEnv> env;
    std::unique_ptr<Db> envelopes, rcpts, next_try;
    std::string dir, quarantine_dir;
    // The recipient count is taken on first use (counting reads every leaf
    // page, which open() must not wait for) and then kept up to date by the
    // transactions. Transactions hold count_mu shared from begin until their
    // delta is applied; the first count() holds it exclusively while it
    // counts, so no change is counted twice or missed.
    std::shared_mutex count_mu;
    std::atomic<std::int64_t> count{0};
    std::atomic<bool> counted{false};

    // Runs f(txn) in a transaction, again from the start after a deadlock.
    template <class F>
    auto txn(u_int32_t flags, F&& f) -> decltype(f(static_cast<DbTxn*>(nullptr))) {
        std::shared_lock lock(count_mu);
        for (int attempt = 1;; ++attempt) {
            DbTxn* t = nullptr;
            txn_count_delta = 0;
            try {
                env->txn_begin(nullptr, &t, flags);
                auto r = f(t);
                std::exchange(t, nullptr)->commit(0);
                count += txn_count_delta;
                checkpoint_if_due();
                return r;
            } catch (const DbException& e) {
                if (t) abort_quietly(t);
                bool deadlock = e.get_errno() == DB_LOCK_DEADLOCK || e.get_errno() == DB_LOCK_NOTGRANTED;
                if (!deadlock || attempt == max_deadlock_retries) throw to_error(e);
            } catch (...) {
                if (t) abort_quietly(t);
                throw;
            }
        }
    }
    // Berkeley DB checks the log written since the last checkpoint. One that
    // fails (ENOSPC) is taken again after the next commit, or by the
    // maintenance; the commit before it stands.
    void checkpoint_if_due() {
        try {
            env->txn_checkpoint(checkpoint_every_kib, 0, 0);
        } catch (const DbException& e) {
            if (e.get_errno() == DB_RUNRECOVERY) throw to_error(e);
            log_error(std::string("defedb: checkpoint: ") + e.what());
        }
    }
    static void abort_quietly(DbTxn* t) {
        try {
            t->abort();
        } catch (const DbException& e) {
            spdlog::error("defedb: transaction abort: {}", e.what());
        }
    }

    // Walks rcpts.db from key `from` (the first record when empty) while
    // f(cursor, key, data) returns true. When f stops, `from` is set to the
    // key it stopped at and the result is true; false at the end of the DB.
    template <class F>
    bool scan(DbTxn* t, u_int32_t get_flags, std::string& from, F&& f) {
        Cursor c(*rcpts, t);
        Out k, d;
        int rc;
        if (from.empty()) {
            rc = c->get(&k, &d, DB_FIRST | get_flags);
        } else {
            k.assign(from);
            rc = c->get(&k, &d, DB_SET_RANGE | get_flags);
        }
        for (; rc == 0; rc = c->get(&k, &d, DB_NEXT | get_flags)) {
            if (!f(c.c, k.view(), d.view())) {
                from.assign(k.view());
                return true;
            }
        }
        return false;
    }

    // Recipients of ta_id in index order: f(cursor, record) for each.
    template <class F>
    void for_ta(DbTxn* t, u_int32_t get_flags, const std::string& ta_id, F&& f) {
        std::string from = ta_id;
        scan(t, get_flags, from, [&](Dbc* c, std::string_view k, std::string_view d) {
            if (k.size() != ta_id.size() + 4 || k.substr(0, ta_id.size()) != ta_id) return false;
            if (auto r = decode_rcpt(k, d)) {
                f(c, *r);
            } else {
                quarantine(c, "rcpt", k, d);
            }
            return true;
        });
    }

    // A record we cannot decode: its bytes go to the quarantine directory,
    // the record is deleted (so it does not block the index), and a line is
    // logged. Only a disk or version problem can cause it: we write every
    // record ourselves, on pages with checksums.
    void quarantine(Dbc* c, const char* table, std::string_view key, std::string_view data) {
        std::string hex;
        for (unsigned char ch : key) {
            static constexpr char digits[] = "0123456789abcdef";
            hex += digits[ch >> 4];
            hex += digits[ch & 15];
        }
        std::string copy;
        if (!quarantine_dir.empty()) {
            const std::string name = std::string("defedb-") + table + "-" + hex;
            const std::string err = quarantine_write(quarantine_dir, name, data);
            copy = err.empty() ? ", copy in " + quarantine_dir + "/" + name
                               : ", no copy (" + err + ")";
        }
        spdlog::error("defedb: corrupt {} record {} removed{}", table, hex, copy);
        c->del(0);
        if (std::string_view(table) == "rcpt") --txn_count_delta;
    }

    bool exists(DbTxn* t, Db& db, const std::string& key) {
        Dbt k(const_cast<char*>(key.data()), static_cast<u_int32_t>(key.size()));
        Dbt d;
        d.set_flags(DB_DBT_PARTIAL | DB_DBT_USERMEM);  // presence only, no bytes
        return db.get(t, &k, &d, DB_RMW) == 0;
    }

    void put(DbTxn* t, const DeferredRcpt& r) {
        std::string key = rcpt_key(r.ta_id, r.idx), val = encode_rcpt(r);
        In k(key), v(val);
        rcpts->put(t, &k, &v, 0);
    }

    void close_all() noexcept {
        for (auto* db : {&next_try, &rcpts, &envelopes}) {
            if (!*db) continue;
            try {
                (*db)->close(0);
            } catch (const DbException& e) {
                log_error(std::string("defedb: close: ") + e.what());
            }
            db->reset();
        }
        if (env) {
            try {
                env->close(0);
            } catch (const DbException& e) {
                log_error(std::string("defedb: close: ") + e.what());
            }
            env.reset();
        }
    }
};

Defedb::Defedb() : impl_(std::make_unique<Impl>()) {}

Defedb::~Defedb() { close(); }

bool Defedb::open(const std::string& dir, const std::string& quarantine_dir, std::string& err) {
    close();
    auto& m = *impl_;
    m.dir = dir;
    m.quarantine_dir = quarantine_dir;
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
        err = "DEFEDB " + dir + ": " + ec.message();
        return false;
    }
    last_db_message.clear();
    try {
        m.env = std::make_unique<DbEnv>(0u);
        m.env->set_errcall(db_errcall);
        m.env->set_cachesize(0, 32u << 20, 1);
        m.env->set_lk_detect(DB_LOCK_DEFAULT);
        m.env->set_lk_max_locks(50000);
        m.env->set_lk_max_objects(50000);
        m.env->log_set_config(DB_LOG_AUTO_REMOVE, 1);
        m.env->set_lg_max(log_file_size);
        m.env->log_set_config(DB_LOG_ZERO, 1);
        // DB_PRIVATE: QMGR is the environment's only user, so its regions
        // live in QMGR's heap instead of files (open in half the time). The
        // db_* tools work on the files while QMGR is stopped.
        m.env->open(dir.c_str(),
                    DB_CREATE | DB_INIT_TXN | DB_INIT_LOCK | DB_INIT_LOG | DB_INIT_MPOOL |
                        DB_RECOVER | DB_THREAD | DB_PRIVATE,
                    0600);
        auto open_db = [&](std::unique_ptr<Db>& db, const char* file) {
            db = std::make_unique<Db>(m.env.get(), 0u);
            db->set_flags(DB_CHKSUM);
            db->open(nullptr, file, nullptr, DB_BTREE, DB_CREATE | DB_AUTO_COMMIT | DB_THREAD, 0600);
        };
        open_db(m.envelopes, "envelopes.db");
        open_db(m.rcpts, "rcpts.db");
        open_db(m.next_try, "next_try.db");
        m.txn(0, [&](DbTxn* t) { return m.rcpts->associate(t, m.next_try.get(), index_key, DB_CREATE); });
        m.counted = false;
    } catch (const DbException& e) {
        err = "DEFEDB " + dir + ": cannot open: " + e.what();
        if (!last_db_message.empty() && last_db_message != e.what()) err += " (" + last_db_message + ")";
        // Recovery writes pages: on a full disk it panics, and the DEFEDB
        // is fine. Moving it aside then would lose the deferred mail.
        std::error_code space_ec;
        const auto space = std::filesystem::space(dir, space_ec);
        if (!space_ec && space.available < disk_full_below)
            err += "; its file system is full (" + std::to_string(space.available) +
                   " bytes free): free space and start again, nothing is lost";
        else if (e.get_errno() == DB_RUNRECOVERY || e.get_errno() == DB_VERIFY_BAD || e.get_errno() == EINVAL)
            err += "; the DEFEDB looks damaged: salvage records with db_dump -r, or move " + dir +
                   " aside to start with an empty one";
        m.close_all();
        return false;
    }
    return true;
}

void Defedb::close() {
    if (!impl_->env) return;
    try {
        checkpoint();
    } catch (const DefedbError& e) {
        log_error(e.what());
    }
    impl_->close_all();
}

void Defedb::put_many(const std::vector<DeferredTa>& batch) {
    auto& m = *impl_;
    for (const auto& ta : batch) {
        if (!smx::valid_ta_id(ta.envelope.ta_id)) throw DefedbError("defedb: bad ta-id " + ta.envelope.ta_id, false);
        for (const auto& r : ta.rcpts)
            if (r.ta_id != ta.envelope.ta_id) throw DefedbError("defedb: recipient of another transaction", false);
    }
    m.txn(no_sync_ ? DB_TXN_WRITE_NOSYNC : DB_TXN_SYNC, [&](DbTxn* t) {
        for (const auto& ta : batch) {
            std::string val = encode_envelope(ta.envelope);
            In k(ta.envelope.ta_id), v(val);
            m.envelopes->put(t, &k, &v, DB_NOOVERWRITE);  // DB_KEYEXIST: already there
            for (const auto& r : ta.rcpts) {
                txn_count_delta += !m.exists(t, *m.rcpts, rcpt_key(r.ta_id, r.idx));
                m.put(t, r);
            }
        }
        return true;
    });
}

void Defedb::put_deferred(const smx::msg::TaCommit& envelope, const DeferredRcpt& rcpt) {
    put_many({DeferredTa{envelope, {rcpt}}});
}

bool Defedb::update(const DeferredRcpt& r) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
        std::string key = rcpt_key(r.ta_id, r.idx);
        In k(key);
        Out d;
        if (m.rcpts->get(t, &k, &d, DB_RMW) != 0) return false;
        auto stored = decode_rcpt(key, d.view());
        if (!stored) return false;
        stored->attempts = r.attempts;
        stored->last_attempt_us = r.last_attempt_us;
        stored->next_try_us = r.next_try_us;
        stored->last_reply = r.last_reply;
        stored->last_relay = r.last_relay;
        stored->warned = stored->warned || r.warned;
        m.put(t, *stored);
        return true;
    });
}

bool Defedb::remove(const std::string& ta_id, std::uint32_t idx) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
        std::string key = rcpt_key(ta_id, idx);
        In k(key);
        if (m.rcpts->del(t, &k, 0) != 0) return false;
        --txn_count_delta;
        bool others = false;
        m.for_ta(t, 0, ta_id, [&](Dbc*, const DeferredRcpt&) { others = true; });
        if (!others) {
            In ek(ta_id);
            m.envelopes->del(t, &ek, 0);
        }
        return true;
    });
}

std::size_t Defedb::remove_ta(const std::string& ta_id) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
        std::size_t removed = 0;
        m.for_ta(t, DB_RMW, ta_id, [&](Dbc* c, const DeferredRcpt&) {
            c->del(0);
            ++removed;
        });
        In ek(ta_id);
        m.envelopes->del(t, &ek, 0);
        txn_count_delta -= static_cast<std::int64_t>(removed);
        return removed;
    });
}

bool Defedb::has_ta(const std::string& ta_id) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) { return m.exists(t, *m.envelopes, ta_id); });
}

std::vector<DeferredTa> Defedb::due(std::uint64_t now_us, std::size_t limit, std::uint64_t lease_until_us) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
        std::vector<DeferredRcpt> got;
        {
            Cursor c(*m.next_try, t);
            Out sk, pk, d;
            u_int32_t rmw = lease_until_us ? DB_RMW : 0;
            for (int rc = c->pget(&sk, &pk, &d, DB_FIRST | rmw); rc == 0 && got.size() < limit;
                 rc = c->pget(&sk, &pk, &d, DB_NEXT | rmw)) {
                auto when = index_time(sk.view());
                if (!when || *when > now_us) break;
                if (auto r = decode_rcpt(pk.view(), d.view())) {
                    got.push_back(std::move(*r));
                } else {
                    m.quarantine(c.c, "rcpt", pk.view(), d.view());
                }
            }
        }
        std::vector<DeferredTa> out;
        std::map<std::string, std::size_t> pos;
        for (auto& r : got) {
            auto it = pos.find(r.ta_id);
            if (it == pos.end()) {
                In k(r.ta_id);
                Out d;
                std::optional<smx::msg::TaCommit> env;
                if (m.envelopes->get(t, &k, &d, 0) == 0) env = decode_envelope(d.view());
                if (!env) {
                    // A recipient without a readable envelope cannot be delivered.
                    spdlog::error("{}: defedb: envelope missing or corrupt", r.ta_id);
                    std::string from = r.ta_id;
                    m.scan(t, DB_RMW, from, [&](Dbc* c, std::string_view key, std::string_view data) {
                        if (key.substr(0, r.ta_id.size()) != r.ta_id) return false;
                        m.quarantine(c, "rcpt", key, data);
                        return true;
                    });
                    pos[r.ta_id] = SIZE_MAX;
                    continue;
                }
                it = pos.emplace(r.ta_id, out.size()).first;
                out.push_back(DeferredTa{std::move(*env), {}});
            }
            if (it->second == SIZE_MAX) continue;
            if (lease_until_us) {
                r.next_try_us = lease_until_us;
                m.put(t, r);
            }
            out[it->second].rcpts.push_back(std::move(r));
        }
        return out;
    });
}

std::optional<std::uint64_t> Defedb::next_due_time() {
    auto& m = *impl_;
    return m.txn(0, [&](DbTxn* t) -> std::optional<std::uint64_t> {
        Cursor c(*m.next_try, t);
        Out k;
        Dbt d;
        d.set_flags(DB_DBT_PARTIAL | DB_DBT_USERMEM);
        if (c->get(&k, &d, DB_FIRST) != 0) return std::nullopt;
        return index_time(k.view());
    });
}

void Defedb::for_each(const std::function<void(const DeferredTa&)>& f) {
    auto& m = *impl_;
    std::string from;
    bool more = true;
    while (more) {
        std::vector<DeferredTa> chunk;
        more = m.txn(0, [&](DbTxn* t) {
            chunk.clear();
            std::string resume = from;
            std::size_t n = 0;
            bool stopped = m.scan(t, 0, resume, [&](Dbc* c, std::string_view k, std::string_view d) {
                auto r = decode_rcpt(k, d);
                if (!r) {
                    m.quarantine(c, "rcpt", k, d);
                    return true;
                }
                bool new_ta = chunk.empty() || chunk.back().envelope.ta_id != r->ta_id;
                if (new_ta && n >= scan_chunk) return false;  // chunks end between transactions
                if (new_ta) {
                    In ek(r->ta_id);
                    Out ed;
                    std::optional<smx::msg::TaCommit> env;
                    if (m.envelopes->get(t, &ek, &ed, 0) == 0) env = decode_envelope(ed.view());
                    if (!env) {  // listed with what the recipient knows; due() deals with it
                        env.emplace();
                        env->ta_id = r->ta_id;
                    }
                    chunk.push_back(DeferredTa{std::move(*env), {}});
                }
                chunk.back().rcpts.push_back(std::move(*r));
                ++n;
                return true;
            });
            from = resume;
            return stopped;
        });
        for (const auto& ta : chunk) f(ta);
    }
}

std::size_t Defedb::set_held(const std::string& ta_id, bool held) {
    auto& m = *impl_;
    return m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
        std::size_t n = 0;
        m.for_ta(t, DB_RMW, ta_id, [&](Dbc* c, DeferredRcpt r) {
            ++n;
            if (r.held == held) return;
            r.held = held;
            std::string key = rcpt_key(r.ta_id, r.idx), val = encode_rcpt(r);
            In k(key), v(val);
            c->put(&k, &v, DB_CURRENT);
        });
        return n;
    });
}

std::optional<DeferredTa> Defedb::get(const std::string& ta_id) {
    auto& m = *impl_;
    return m.txn(0, [&](DbTxn* t) -> std::optional<DeferredTa> {
        DeferredTa ta;
        m.for_ta(t, 0, ta_id, [&](Dbc*, DeferredRcpt r) { ta.rcpts.push_back(std::move(r)); });
        if (ta.rcpts.empty()) return std::nullopt;
        In ek(ta_id);
        Out ed;
        std::optional<smx::msg::TaCommit> env;
        if (m.envelopes->get(t, &ek, &ed, 0) == 0) env = decode_envelope(ed.view());
        if (env) ta.envelope = std::move(*env);
        ta.envelope.ta_id = ta_id;
        return ta;
    });
}

std::size_t Defedb::flush_all(std::uint64_t now_us,
                              const std::function<bool(const DeferredRcpt&)>& pick) {
    auto& m = *impl_;
    std::size_t moved = 0;
    std::string from;
    for (bool more = true; more;) {
        std::size_t seen = 0, changed = 0;
        std::string resume;
        more = m.txn(DB_TXN_WRITE_NOSYNC, [&](DbTxn* t) {
            seen = changed = 0;
            resume = from;
            return m.scan(t, DB_RMW, resume, [&](Dbc* c, std::string_view k, std::string_view d) {
                if (seen++ == scan_chunk) return false;
                auto r = decode_rcpt(k, d);
                if (!r) {
                    m.quarantine(c, "rcpt", k, d);
                } else if (!r->held && r->next_try_us > now_us && (!pick || pick(*r))) {
                    r->next_try_us = now_us;
                    std::string key(k), val = encode_rcpt(*r);
                    In kk(key), v(val);
                    c->put(&kk, &v, DB_CURRENT);
                    ++changed;
                }
                return true;
            });
        });
        from = resume;
        moved += changed;
    }
    return moved;
}

std::uint64_t Defedb::count() {
    auto& m = *impl_;
    if (!m.counted) {
        std::unique_lock lock(m.count_mu);
        if (!m.counted) {
            DB_BTREE_STAT* st = nullptr;
            try {
                m.rcpts->stat(nullptr, &st, 0);
            } catch (const DbException& e) {
                throw to_error(e);
            }
            m.count = st->bt_nkeys;
            std::free(st);
            m.counted = true;
        }
    }
    return static_cast<std::uint64_t>(m.count.load());
}

void Defedb::checkpoint() {
    try {
        impl_->env->txn_checkpoint(0, 0, 0);
    } catch (const DbException& e) {
        throw to_error(e);
    }
}

} // namespace smx::qmgr
