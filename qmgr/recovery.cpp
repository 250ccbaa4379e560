// Start-up: the transactions IBDB recovered go back into the active queue;
// envelopes without their whole content go to quarantine. DEFEDB needs no replay: its
// timer starts reading the index head. Then the orphan sweeper starts.
#include "qmgr/qmgr.hpp"

#include "libsm/content_file.hpp"
#include "libsm/content_segment.hpp"
#include "libsm/ids.hpp"
#include "qmgr/quarantine.hpp"

#include <spdlog/spdlog.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace smx::qmgr {

namespace {

// Whether recovery has the content of env, and if not what there is of it.
struct Content {
    bool whole = false;
    bool found = true;   // something of it is there to keep beside the envelope
    std::string where;   // for the log: the file, or the segment record
    std::string what;    // why it is not whole
    std::string content_id;  // what names it (a DEFEDB copy may stand in for a record)
};

// A segment record must be whole and match its CRC: a power cut during a
// batch sync can leave an envelope durable and its record not. Its DEFEDB
// copy (a content file named by the transaction id, synced before DEFEDB
// held it) stands in when the segment already went. A content file must be
// there and of the envelope's size: a power cut during a batch sync whose
// ack never went out can leave an envelope durable with its content file
// short (content_sync = "batch" syncs both in one syncfs). Either must be
// what its writer made (smx::content::Body): never deliver a truncated
// message, or one SMTPS's account swapped for a link since.
Content content_of(const smx::content::Store& store, const smx::msg::TaCommit& env, bool segment) {
    Content c;
    c.where = segment ? "segment record " + env.content_id
              : smx::valid_ta_id(env.content_id) ? smx::content::file_path(store.dir, env.content_id, store.hashed)
                                             : std::string("(invalid id)");
    smx::content::Body body;
    const int err = body.open(store, env.content_id, env.ta_id, env.size, nullptr, segment);
    if (!err) {
        c.whole = true;
        c.content_id = env.content_id;
        return c;
    }
    if (segment && has_defedb_copy(store, env)) {
        c.whole = true;
        c.content_id = env.ta_id;
        return c;
    }
    c.found = err != ENOENT && err != EINVAL;
    c.what = err == ENOENT ? "missing" : body.why();
    return c;
}

// What there is of the content, kept beside the envelope: the content file
// moved (if it is one), or a segment record's bytes (header included) copied.
void quarantine_content(const smx::content::Store& store, const smx::msg::TaCommit& env,
                        const std::string& qdir) {
    const std::string name = "cdb-" + env.ta_id;
    const auto ref = smx::content::parse_segment_ref(env.content_id);
    int err = 0;
    std::string why;
    if (!ref) {
        const smx::content::Expect upto{store.writers.smtps, store.writers.qmgr, env.size, false};
        err = quarantine_move(smx::content::file_path(store.dir, env.content_id, store.hashed), qdir, name, upto,
                              why);
    } else {
        int fd = -1;
        std::uint64_t size = 0;
        err = smx::content::open_checked(smx::content::segment_path(store.dir, ref->segment),
                                        smx::content::segment_file(store.writers), fd, size, why);
        if (!err) {
            std::string bytes(smx::content::segment_header_size +
                                  std::min<std::uint64_t>(env.size, smx::content::segment_record_max),
                              '\0');
            const ssize_t n = ::pread(fd, bytes.data(), bytes.size(), static_cast<off_t>(ref->offset));
            err = n < 0 ? errno : 0;
            why = n < 0 ? std::strerror(errno) : "";
            ::close(fd);
            bytes.resize(n < 0 ? 0 : static_cast<std::size_t>(n));
            if (!err && !(why = quarantine_write(qdir, name, bytes)).empty()) err = EIO;
        }
    }
    if (err)
        spdlog::error("{}: its content {} not kept in {}/{}: {}", env.ta_id, env.content_id, qdir,
                      name, why);
}

} // namespace

void Qmgr::restore(std::vector<RecoveredTa> tas) {
    std::size_t restored = 0;
    for (auto& rt : tas) {
        auto& env = rt.envelope;
        const bool segment = smx::content::parse_segment_ref(env.content_id).has_value();
        Content c = content_of(store_, env, segment);
        // With every recipient done nothing needs a segment record (it may
        // have gone once the transaction left memory before the crash).
        const bool needed =
            !segment || std::any_of(rt.rcpt_done.begin(), rt.rcpt_done.end(),
                                    [](bool done) { return !done; }) ||
            rt.rcpt_done.size() < env.rcpts.size();
        if (!smx::valid_ta_id(env.ta_id) || (!c.whole && needed)) {
            // Nothing to deliver without content: keep the envelope (and
            // what there is of the content) for a human, and close the
            // transaction so the log can be rotated.
            const std::string qdir = cfg_.quarantine_dir_abs();
            const std::string name =
                (smx::valid_ta_id(env.ta_id) ? env.ta_id : "invalid") + std::string(".envelope");
            if (c.found && smx::valid_ta_id(env.ta_id))
                quarantine_content(store_, env, qdir);
            const std::string err = quarantine_write(qdir, name, smx::msg::envelope_bytes(env));
            if (err.empty())
                spdlog::error("{}: content {} {} at recovery; envelope saved as {}/{}",
                              env.ta_id, c.where, c.what, qdir, name);
            else
                spdlog::error("{}: content {} {} at recovery; envelope not saved ({})",
                              env.ta_id, c.where, c.what, err);
            ++counters_.quarantined;
            ibdb_.ta_done(env.ta_id);
            continue;
        }
        if (c.whole && c.content_id != env.content_id) {
            spdlog::info("{}: content segment record {} gone; its DEFEDB copy stands in",
                         env.ta_id, env.content_id);
            env.content_id = c.content_id;
        }
        // Those IBDB marks deferred stay closed: DEFEDB's timer brings them back.
        Ta* ta = queue_.admit_recovered(env, rt.rcpt_done, rt.rcpt_deferred);
        if (!ta) continue;  // the log held it twice; the first copy counts
        std::vector<std::uint32_t> todo;
        for (std::uint32_t i = 0; i < ta->rcpts().size(); ++i)
            if (ta->rcpt(i).state() == RcptState::active) todo.push_back(i);
        // A crash between the DEFEDB write and IBDB's (unsynced) "deferred"
        // record leaves a recipient in both: memory delivers it now, so its
        // DEFEDB copy goes (queued before the first due() on the strand), and
        // the content waits for DEFEDB's word on the rest.
        // A held one is parked again instead (its DEFEDB copy, if any, is
        // overwritten).
        if (ta->env->hold.empty())
            for (auto i : todo) deferred_.remove(ta->id, i);
        if (todo.empty()) {
            check_ta(*ta);
            continue;
        }
        ++restored;
        spdlog::info("{}: from=<{}>, size={}, nrcpt={} (queue active, recovered)", ta->id,
                     ta->sender(), ta->size(), ta->rcpts().size());
        start(*ta, todo);
    }
    if (!tas.empty())
        spdlog::info("recovery: {} transactions back in the active queue", restored);
    deferred_.start();
    sweeper_.start();
    segments_.start();
}

} // namespace smx::qmgr
