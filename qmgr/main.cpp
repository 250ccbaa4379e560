// smx-qmgr [-c FILE]: the queue manager. Opens DEFEDB, recovers the active
// queue from IBDB, then serves SMTPS, SMTPC and the CLI on
// <run_dir>/qmgr.sock until SIGTERM.
#include "qmgr/defedb.hpp"
#include "qmgr/disk_space.hpp"
#include "qmgr/ibdb.hpp"
#include "qmgr/metrics_http.hpp"
#include "qmgr/qmgr.hpp"
#include "qmgr/server.hpp"

#include "libsm/config.hpp"
#include "libsm/config_reload.hpp"
#include "libsm/ids.hpp"
#include "libsm/limits.hpp"
#include "libsm/log.hpp"
#include "libsm/panic.hpp"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

namespace {

int usage() {
    std::fprintf(stderr, "usage: smx-qmgr [-c FILE]\n");
    return 2;
}

} // namespace

int main(int argc, char** argv) {
    using namespace smx::qmgr;
    std::string cfg_path;
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "-c") == 0 && i + 1 < argc) cfg_path = argv[++i];
        else return usage();
    }
    smx::Config cfg;
    try {
        cfg = smx::load_config(cfg_path);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "smx-qmgr: %s: %s\n", cfg_path.empty() ? "defaults" : cfg_path.c_str(),
                     e.what());
        return 2;
    }
    smx::init_logging("qmgr", cfg.log);
    smx::install_crash_handlers("qmgr");
    smx::set_id_stream(smx::qmgr_id_stream);  // DSN ids, beside SMTPS's
    smx::raise_nofile();  // peers, metrics clients, DEFEDB and IBDB files

    for (const auto& dir : {cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(), cfg.quarantine_dir_abs(),
                            cfg.content_dir_abs()}) {
        std::error_code ec;
        std::filesystem::create_directories(dir, ec);
        if (ec) {
            spdlog::critical("cannot create {}: {}", dir, ec.message());
            return 1;
        }
    }

    asio::io_context io(1);
    // IBDB's commits (two may sync side by side on a slow device), the content store
    // unlinks and DEFEDB: three threads, so that the rest does not wait for
    // two slow syncs. It outlives IBDB, whose destructor may wait for a
    // write out on it.
    // DEFEDB outlives the pool: a DEFEDB job may still run until join().
    Defedb defedb;
    // Berkeley DB recovery, and the IBDB after it, must be able to write on
    // a full disk.
    DiskSpace::give_back_if_short(cfg);
    {
        std::string err;
        if (!defedb.open(cfg.defedb_dir_abs(), cfg.quarantine_dir_abs(), err)) {
            spdlog::critical("defedb: {}", err);
            return 1;
        }
    }
    asio::thread_pool workers(3);
    int status = 0;
    IbdbOptions opt;
    opt.dir = cfg.ibdb_dir_abs();
    opt.quarantine_dir = cfg.quarantine_dir_abs();
    opt.commit_policy = cfg.queue.commit_adaptive ? CommitPolicy::Kind::adaptive : CommitPolicy::Kind::fixed;
    opt.commit_interval = cfg.queue.commit_interval;
    opt.max_batch = cfg.queue.commit_max_batch;
    opt.file_size = cfg.queue.ibdb_file_size;
    opt.fsync = !cfg.queue.test_no_sync;
    if (opt.fsync && cfg.queue.content_sync == smx::QueueConfig::ContentSync::batch)
        opt.content_dir = cfg.content_dir_abs();
    if (cfg.queue.test_no_sync) {
        defedb.set_no_sync();
        spdlog::warn("queue.test_no_sync: nothing is synced, mail is not durable (test build)");
    }
    try {
        Ibdb ibdb(io.get_executor(), workers, opt);
        Qmgr q(cfg, io.get_executor(), workers, ibdb, defedb);
        q.restore(ibdb.recover());
        Server server(io, cfg, q);
        std::string err;
        if (!server.listen(err)) throw std::runtime_error(err);
        MetricsHttp metrics(io, q);
        if (!cfg.stats.listen.empty() && !metrics.listen(cfg.stats.listen, err))
            throw std::runtime_error("stats.listen: " + err);

        smx::ConfigReloader reloader(io, cfg_path, cfg, [&](smx::Config next) {
            q.reload(std::make_shared<const smx::Config>(std::move(next)));
        });
        asio::signal_set signals(io, SIGTERM, SIGINT);
        asio::steady_timer grace(io);
        signals.async_wait([&](boost::system::error_code ec, int sig) {
            if (ec) return;
            spdlog::info("signal {}: shutting down", sig);
            reloader.stop();
            server.stop();
            metrics.stop();
            q.stop();
            ibdb.flush_sync();
            // Let the acks of the last batch reach SMTPS before we go.
            grace.expires_after(std::chrono::milliseconds(200));
            grace.async_wait([&](boost::system::error_code) { io.stop(); });
        });
        smx::run_or_panic(io, "qmgr");
        // Every QMGR coroutine ends here, while the pool still runs the work
        // it may wait on: none is left to be destroyed after the pool.
        drain(io, q);
        ibdb.flush_sync();
        spdlog::info("stopped");
    } catch (const std::exception& e) {
        spdlog::critical("{}", e.what());
        status = 1;
    }
    workers.join();
    defedb.close();  // its checkpoint may fail (disk full) and log that
    spdlog::shutdown();
    return status;
}
