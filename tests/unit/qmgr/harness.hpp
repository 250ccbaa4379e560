// A Qmgr over real IBDB and DEFEDB files in a temporary spool, driven on
// the test's thread (no sockets): for QMGR's unit tests.
#pragma once

#include "qmgr/qmgr.hpp"

#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"
#include "tests/unit/qmgr/fake_clock.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

namespace qmgr_test {

namespace asio = boost::asio;
namespace fs = std::filesystem;
using namespace smx::qmgr;
using namespace std::chrono_literals;

template <class T>
T decode_frame(const std::string& frame) {
    smx::rec::Frame f{*smx::rec::parse_header(frame.substr(0, smx::rec::header_size)),
                     frame.substr(smx::rec::header_size)};
    std::string err;
    auto v = smx::msg::decode<T>(f, err);
    REQUIRE(v);
    return *v;
}

struct Harness {
    fs::path dir;
    smx::Config cfg;
    // DEFEDB outlives the pool (a job may run until join), the pool
    // outlives Qmgr and IBDB; a restart makes all of them anew.
    std::unique_ptr<Defedb> defedb;
    std::unique_ptr<asio::io_context> io_;
    std::unique_ptr<asio::thread_pool> pool_;
    std::unique_ptr<Ibdb> ibdb;
    std::unique_ptr<Qmgr> q;
    std::vector<smx::msg::TaAck> acks;
    std::vector<smx::msg::Deliver> delivers;
    std::uint64_t link = 0;
    // Set before start(): the tests that move time themselves.
    bool fake_time = false;
    FakeClock fake_clock;
    const smx::Clock& clock() const { return fake_time ? static_cast<const smx::Clock&>(fake_clock) : smx::system_clock(); }

    Harness() {
        char tmpl[] = "/tmp/qmgr-test-XXXXXX";
        REQUIRE(::mkdtemp(tmpl));
        dir = tmpl;
        cfg.queue.spool_dir = dir.string();
        cfg.queue.run_dir = dir.string();
        cfg.queue.min_free_space = 0;
        smx::Route r;
        r.hosts.push_back(smx::HostPort{"127.0.0.1", 2600, true});
        cfg.routes["example.net"] = r;
        start();
    }
    ~Harness() {
        stop();
        std::error_code ec;
        fs::remove_all(dir, ec);
    }
    asio::io_context& io() { return *io_; }
    // Like a QMGR exit: QMGR's coroutines end, pending IBDB records are
    // written, pool jobs finish, and callbacks still queued for the event
    // loop are dropped.
    void stop() {
        if (!q) return;
        q->stop();
        drain(*io_, *q);
        ibdb->flush_sync();
        pool_->join();
        q.reset();
        ibdb.reset();
        pool_.reset();
        io_.reset();
        defedb.reset();
    }
    // Tests that move a store set cfg.queue.content_dir or ibdb_dir
    // between stop() and start().
    void start() {
        for (const auto& d : {cfg.ibdb_dir_abs(), cfg.defedb_dir_abs(), cfg.quarantine_dir_abs()})
            fs::create_directories(d);
        defedb = std::make_unique<Defedb>();
        std::string err;
        REQUIRE(defedb->open(cfg.defedb_dir_abs(), cfg.quarantine_dir_abs(), err));
        io_ = std::make_unique<asio::io_context>();
        pool_ = std::make_unique<asio::thread_pool>(2);
        IbdbOptions o;
        o.dir = cfg.ibdb_dir_abs();
        o.quarantine_dir = cfg.quarantine_dir_abs();
        o.commit_interval = 200us;
        o.fsync = false;
        ibdb = std::make_unique<Ibdb>(io().get_executor(), *pool_, o);
        q = std::make_unique<Qmgr>(cfg, io().get_executor(), *pool_, *ibdb, *defedb, clock());
        q->restore(ibdb->recover());
    }
    void connect_smtpc() {
        link = q->add_smtpc([this](std::string f) {
            delivers.push_back(decode_frame<smx::msg::Deliver>(f));
        });
    }
    template <class Pred>
    bool run_until(Pred p, std::chrono::milliseconds limit = 3000ms) {
        const auto end = std::chrono::steady_clock::now() + limit;
        while (!p() && std::chrono::steady_clock::now() < end) {
            io().run_for(2ms);
            io().restart();
        }
        return p();
    }
    std::string content_path(const std::string& id) {
        return smx::content::file_path(cfg.content_dir_abs(), id, cfg.queue.cdb_hashed);
    }
    smx::msg::TaCommit commit(std::vector<std::string> rcpts, bool with_file = true,
                             const std::string& content = "Subject: x\r\n\r\nbody\r\n",
                             const std::string& refused = {}) {
        smx::msg::TaCommit e;
        e.refused = refused;
        e.ta_id = smx::new_ta_id();
        e.content_id = e.ta_id;
        e.sender = "s@example.org";
        e.client_addr = "127.0.0.1";
        e.arrival_us = clock().now_us();
        for (auto& r : rcpts) e.rcpts.push_back({r, ""});
        if (with_file) {
            fs::create_directories(fs::path(content_path(e.ta_id)).parent_path());
            std::ofstream(content_path(e.ta_id)) << content;
            e.size = fs::file_size(content_path(e.ta_id));
        }
        const std::size_t before = acks.size();
        q->on_commit(e, 7, [this](std::string f) { acks.push_back(decode_frame<smx::msg::TaAck>(f)); });
        REQUIRE(run_until([&] { return acks.size() > before; }));
        return e;
    }
    void result(const smx::msg::Deliver& d, std::vector<std::uint32_t> codes,
                std::string relay = "sink[127.0.0.1]:2600") {
        smx::msg::Result r;
        r.da_id = d.da_id;
        r.relay = std::move(relay);
        for (std::size_t i = 0; i < d.rcpts.size() && i < codes.size(); ++i)
            r.rcpts.push_back({d.rcpts[i].idx, codes[i], "", "reply"});
        q->on_result(link, r);
    }
    smx::msg::CtlReply ctl(std::string cmd, std::vector<std::string> args = {}) {
        std::optional<smx::msg::CtlReply> r;
        q->control({std::move(cmd), std::move(args)}, [&](smx::msg::CtlReply x) { r = std::move(x); });
        REQUIRE(run_until([&] { return r.has_value(); }));
        return *r;
    }
    std::uint64_t stat(const std::string& name) {
        for (const Metric& m : q->metrics())
            if (name == m.name) return m.value;
        FAIL("no metric " << name);
        return 0;
    }
};

} // namespace qmgr_test
