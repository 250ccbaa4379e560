// Qmgr end to end without sockets: TA_COMMIT → IBDB (real files, no fsync)
// → TA_ACK → DELIVER → RESULT → content file removed; deferrals through a real
// DEFEDB, bounces with DSNs, boundary checks, recovery and control.
#include "tests/unit/qmgr/harness.hpp"

#include "libsm/content_segment.hpp"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

using namespace qmgr_test;

TEST_CASE("a committed transaction is acked, delivered and removed") {
    Harness h;
    h.connect_smtpc();
    auto e = h.commit({"a@example.net", "b@Example.NET"});
    REQUIRE(h.acks.back().status == smx::msg::AckStatus::ok);
    CHECK(h.acks.back().ta_id == e.ta_id);
    CHECK(h.stat("received") == 1);
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    const auto& d = h.delivers[0];
    CHECK(d.ta_id == e.ta_id);
    CHECK(d.content_id == e.ta_id);
    CHECK(d.size == e.size);
    CHECK(d.rcpts.size() == 2);
    CHECK(d.nexthops == std::vector<std::string>{"[127.0.0.1]:2600"});
    CHECK(h.stat("active_deliveries") == 1);
    h.result(d, {250, 250});
    CHECK(h.stat("delivered") == 2);
    CHECK(h.stat("queue_size") == 0);
    CHECK(h.stat("queue_transactions") == 0);
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)); }));
    CHECK(h.stat("ibdb_transactions") == 1);
}

TEST_CASE("4xx moves to DEFEDB and comes back after retry_min; 5xx bounces with one DSN") {
    Harness h;
    h.cfg.queue.retry_min = 1s;
    h.cfg.routes["example.org"] = h.cfg.routes["example.net"];
    h.connect_smtpc();
    auto e = h.commit({"a@example.net", "b@example.net", "c@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {451, 550, 550});
    CHECK(h.stat("deferred") == 1);
    CHECK(h.stat("bounced") == 2);
    // The DSN for b and c (one for both) goes to the sender from <>.
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2 && h.stat("queue_deferred") == 1; }));
    const auto dsn = h.delivers[1];  // a copy: delivers grows below
    CHECK(dsn.sender.empty());
    REQUIRE(dsn.rcpts.size() == 1);
    CHECK(dsn.rcpts[0].addr == "s@example.org");
    CHECK(h.stat("dsn_sent") == 1);
    std::ifstream in(h.content_path(dsn.content_id), std::ios::binary);
    const std::string body((std::istreambuf_iterator<char>(in)), {});
    CHECK(body.find("Final-Recipient: rfc822; b@example.net") != std::string::npos);
    CHECK(body.find("Final-Recipient: rfc822; c@example.net") != std::string::npos);
    CHECK(body.find("a@example.net") == std::string::npos);
    // a left memory for DEFEDB; the content stays for it.
    CHECK(h.stat("queue_size") == 1);  // the DSN's recipient
    CHECK(fs::exists(h.content_path(e.ta_id)));
    auto listing = h.ctl("queue");
    CHECK(listing.text.find("a@example.net (deferred, attempts=1") != std::string::npos);
    CHECK(listing.text.find("(451 reply)") != std::string::npos);
    REQUIRE(h.run_until([&] { return h.delivers.size() == 3; }, 4000ms));
    REQUIRE(h.delivers[2].rcpts.size() == 1);
    CHECK(h.delivers[2].rcpts[0].idx == 0);
    h.result(h.delivers[2], {451});  // again: attempts 2, next try after 2 s
    h.run_until([&] { return false; }, 100ms);
    CHECK(h.ctl("queue").text.find("attempts=2") != std::string::npos);
    CHECK(h.ctl("flush").text.find("1 deferred") != std::string::npos);
    REQUIRE(h.run_until([&] { return h.delivers.size() == 4; }, 1000ms));
    h.result(h.delivers[3], {250});
    h.result(h.delivers[1], {250});
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)) && !fs::exists(h.content_path(dsn.content_id)); }));
    CHECK(h.stat("queue_deferred") == 0);
    CHECK(h.ctl("queue").text.find("-- 0 Kbytes in 0 requests.") != std::string::npos);
}

TEST_CASE("a null-sender message is never bounced") {
    Harness h;
    h.connect_smtpc();
    smx::msg::TaCommit e;
    e.ta_id = e.content_id = smx::new_ta_id();
    e.arrival_us = smx::now_us();
    e.rcpts.push_back({"a@example.net", ""});
    fs::create_directories(fs::path(h.content_path(e.ta_id)).parent_path());
    std::ofstream(h.content_path(e.ta_id)) << "Subject: x\r\n\r\nbody\r\n";
    e.size = fs::file_size(h.content_path(e.ta_id));
    h.q->on_commit(e, 1, [&](std::string f) { h.acks.push_back(decode_frame<smx::msg::TaAck>(f)); });
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {550});
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)); }));
    CHECK(h.stat("bounced") == 1);
    CHECK(h.stat("dsn_sent") == 0);
    CHECK(h.delivers.size() == 1);
}

TEST_CASE("local mail the milters refused bounces every recipient at once, with their reply") {
    Harness h;
    h.cfg.routes["example.org"] = h.cfg.routes["example.net"];
    h.connect_smtpc();
    const std::string refused = "554 5.7.1 rejected by the filter";
    auto e = h.commit({"a@example.net", "b@example.net"}, true, "Subject: spam\r\n\r\nbody\r\n",
                      refused);
    CHECK(h.acks.back().status == smx::msg::AckStatus::ok);
    // The DSN is the only delivery: the recipients never go to SMTPC.
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    const auto dsn = h.delivers[0];
    CHECK(dsn.sender.empty());
    REQUIRE(dsn.rcpts.size() == 1);
    CHECK(dsn.rcpts[0].addr == "s@example.org");
    CHECK(h.stat("bounced") == 2);
    std::ifstream in(h.content_path(dsn.content_id), std::ios::binary);
    const std::string body((std::istreambuf_iterator<char>(in)), {});
    CHECK(body.find("Final-Recipient: rfc822; a@example.net") != std::string::npos);
    CHECK(body.find("Final-Recipient: rfc822; b@example.net") != std::string::npos);
    CHECK(body.find("Status: 5.7.1") != std::string::npos);
    CHECK(body.find("554 5.7.1 rejected by the filter") != std::string::npos);
    CHECK(body.find("Subject: spam") != std::string::npos);
    h.result(dsn, {250});
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)); }));
}

TEST_CASE("past max_queue_lifetime a temporary failure bounces") {
    Harness h;
    h.cfg.queue.max_queue_lifetime = 0s;
    h.cfg.routes["example.org"] = h.cfg.routes["example.net"];
    h.connect_smtpc();
    h.commit({"a@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {451});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    CHECK(h.delivers[1].sender.empty());
    CHECK(h.stat("deferred") == 0);
    std::ifstream in(h.content_path(h.delivers[1].content_id), std::ios::binary);
    const std::string body((std::istreambuf_iterator<char>(in)), {});
    CHECK(body.find("Status: 4.4.7") != std::string::npos);
}

TEST_CASE("deferred recipients survive a restart and come back when due") {
    Harness h;
    h.cfg.queue.retry_min = 1s;
    h.connect_smtpc();
    auto e = h.commit({"a@example.net", "b@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {451, 250});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1 && h.stat("queue_size") == 0; }));
    h.stop();
    h.delivers.clear();
    h.start();
    CHECK(h.stat("queue_transactions") == 0);  // nothing loaded at start
    h.connect_smtpc();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }, 4000ms));
    REQUIRE(h.delivers[0].rcpts.size() == 1);
    CHECK(h.delivers[0].rcpts[0].addr == "a@example.net");
    h.result(h.delivers[0], {250});
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)); }));
}

TEST_CASE("control: hold, release and delete work on the active queue and DEFEDB") {
    Harness h;
    h.cfg.queue.retry_min = 3600s;
    auto held = h.commit({"a@example.net"});  // no SMTPC yet: waits in memory
    CHECK(h.ctl("hold", {held.ta_id}).status == 0);
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1; }));
    CHECK(h.ctl("queue").text.find("a@example.net (held") != std::string::npos);
    h.connect_smtpc();
    CHECK(h.ctl("flush").status == 0);
    h.run_until([&] { return false; }, 100ms);
    CHECK(h.delivers.empty());  // held: never scheduled
    CHECK(h.ctl("release", {held.ta_id}).status == 0);
    CHECK(h.ctl("flush").status == 0);
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    // delete while in flight: the result is dropped, the content goes.
    auto r = h.ctl("delete", {held.ta_id});
    CHECK(r.text.find("deleted (1 recipients)") != std::string::npos);
    h.result(h.delivers[0], {250});
    CHECK(h.stat("delivered") == 0);
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(held.ta_id)); }));
    // delete of a deferred one
    auto d = h.commit({"b@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    h.result(h.delivers[1], {451});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1; }));
    CHECK(h.ctl("delete", {d.ta_id}).text.find("deleted (1 recipients)") != std::string::npos);
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(d.ta_id)) && h.stat("queue_deferred") == 0; }));
    CHECK(h.ctl("queue").text.find(d.ta_id) == std::string::npos);
    auto none = h.ctl("delete", {d.ta_id});
    CHECK(none.status == 1);
    CHECK(none.text == d.ta_id + ": no such queue id\n");
    const std::string unknown = smx::new_ta_id();
    CHECK(h.ctl("hold", {unknown}).text == unknown + ": no such queue id\n");
}

TEST_CASE("control: several ids a request, ALL and ALL QUEUE, as postsuper") {
    Harness h;
    h.cfg.queue.retry_min = 3600s;
    h.connect_smtpc();
    auto a = h.commit({"a@example.net"});
    auto b = h.commit({"b@example.net", "b2@example.net"});
    auto c = h.commit({"c@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 3; }));
    h.result(h.delivers[0], {451});
    h.result(h.delivers[1], {451, 451});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 3; }));
    // a and b wait in DEFEDB, c is in flight (QMGR's "active").

    // An unknown id among others: reported, status 1, the others done.
    const std::string gone = smx::new_ta_id();
    auto r = h.ctl("hold", {a.ta_id, gone, b.ta_id});
    CHECK(r.status == 1);
    CHECK(r.text == a.ta_id + ": held (1 recipients)\n" + gone + ": no such queue id\n" +
                        b.ta_id + ": held (2 recipients)\n");
    CHECK(h.ctl("hold", {"ALL", "hold"}).text == "2 messages held (3 recipients)\n");
    // ALL for release: the held ones.
    r = h.ctl("release", {"ALL"});
    CHECK(r.status == 0);
    CHECK(r.text == "2 messages released (3 recipients)\n");
    CHECK(h.ctl("release", {"ALL"}).text == "0 messages released (0 recipients)\n");
    // ALL QUEUE: those with a recipient in it.
    CHECK(h.ctl("hold", {"ALL", "active"}).text == "1 messages held (1 recipients)\n");
    CHECK(h.ctl("release", {"ALL", "hold"}).text == "0 messages released (0 recipients)\n");
    CHECK(h.ctl("delete", {"ALL", "deferred"}).text == "2 messages deleted (3 recipients)\n");
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 0; }));
    CHECK(h.ctl("delete", {"ALL"}).text == "1 messages deleted (1 recipients)\n");
    h.result(h.delivers[2], {250});  // dropped: deleted in flight
    CHECK(h.stat("delivered") == 0);
    CHECK(h.ctl("queue").text.find("-- 0 Kbytes in 0 requests.") != std::string::npos);

    // What a request may hold: ids (at most max_ctl_ids), or ALL [QUEUE].
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{}, {"ALL", "incoming"}, {"ALL", "hold", "x"}, {"nonsense"},
          {a.ta_id, "ALL"}, std::vector<std::string>(smx::msg::max_ctl_ids + 1, gone)}) {
        r = h.ctl("delete", bad);
        CHECK(r.status == 1);
        CHECK(r.text.rfind("usage: delete QUEUE-ID... (at most 1000) | delete ALL", 0) == 0);
    }
    r = h.ctl("release", std::vector<std::string>(smx::msg::max_ctl_ids, gone));
    CHECK(r.status == 1);
    CHECK(std::count(r.text.begin(), r.text.end(), '\n') == 1000);
}

TEST_CASE("control: show's envelope, the content page by page, queue --json lines") {
    Harness h;
    h.cfg.queue.retry_min = 3600s;
    std::string content = "Subject: big\r\n\r\n";
    while (content.size() < 2'500'000) content += "0123456789abcdef 0123456789abcdef\r\n";
    auto e = h.commit({"a@example.net", "b@example.org"}, true, content);
    auto envelope = h.ctl("show", {e.ta_id, "envelope"});
    REQUIRE(envelope.status == 0);
    CHECK(envelope.text.rfind("*** ENVELOPE RECORDS " + e.ta_id + " ***\n", 0) == 0);
    CHECK(envelope.text.find("recipient: a@example.net (active") != std::string::npos);
    CHECK(envelope.text.find("HEADER") == std::string::npos);
    std::string got;
    for (;;) {
        auto page = h.ctl("show", {e.ta_id, "content=" + std::to_string(got.size())});
        REQUIRE(page.status == 0);
        if (page.text.empty()) break;
        CHECK(page.text.size() <= 1u << 20);
        got += page.text;
    }
    CHECK(got == content);
    CHECK(h.ctl("show", {e.ta_id, "content=99999999999"}).text.empty());
    CHECK(h.ctl("queue", {"envelope"}).status == 1);
    CHECK(h.ctl("show", {e.ta_id, "content=-1"}).status == 1);

    // b@example.org has no route: deferred at once, with its reason.
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1; }));
    auto json = h.ctl("queue", {"json"});
    REQUIRE(json.status == 0);
    CHECK(json.text.rfind("{\"queue_name\": \"active\", \"queue_id\": \"" + e.ta_id +
                              "\", \"arrival_time\": " + std::to_string(e.arrival_us / 1'000'000) +
                              ", \"message_size\": " + std::to_string(content.size()) +
                              ", \"forced_expire\": false, \"sender\": \"s@example.org\", "
                              "\"recipients\": [{\"address\": \"a@example.net\", \"state\": "
                              "\"active\", \"attempts\": 0, \"next_try\": null}, {\"address\": "
                              "\"b@example.org\", \"delay_reason\": \"4.4.4 no route to "
                              "example.org\", \"state\": \"deferred\", \"attempts\": 1, "
                              "\"next_try\": ",
                          0) == 0);
    CHECK(json.text.ends_with("}]}\n"));
    CHECK(std::count(json.text.begin(), json.text.end(), '\n') == 1);
}

TEST_CASE("orphan content files older than orphan_age go to quarantine at start-up") {
    Harness h;
    h.stop();
    const std::string old_id = smx::new_ta_id(), new_id = smx::new_ta_id();
    for (const auto& id : {old_id, new_id}) {
        fs::create_directories(fs::path(h.content_path(id)).parent_path());
        std::ofstream(h.content_path(id)) << "x";
    }
    std::ofstream(h.content_path(old_id) + ".tmp") << "x";
    const auto past = fs::file_time_type::clock::now() - h.cfg.queue.orphan_age - 1s;
    fs::last_write_time(h.content_path(old_id), past);
    fs::last_write_time(h.content_path(old_id) + ".tmp", past);
    h.start();
    REQUIRE(h.run_until([&] { return h.stat("quarantined") == 1; }));
    CHECK(fs::exists(h.dir / "quarantine" / ("cdb-" + old_id)));
    CHECK(fs::exists(h.content_path(new_id)));
    CHECK(fs::exists(h.content_path(old_id) + ".tmp"));  // SMTPS's own leftovers
}

TEST_CASE("the periodic sweep takes orphans, never the content of queued or deferred mail") {
    Harness h;
    h.stop();
    h.cfg.queue.orphan_age = 2s;  // a sweep every second
    h.start();
    h.connect_smtpc();
    const auto active = h.commit({"a@example.net"});    // in flight, never answered
    const auto deferred = h.commit({"b@example.net"});  // in DEFEDB only
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    const auto& d = h.delivers[0].ta_id == deferred.ta_id ? h.delivers[0] : h.delivers[1];
    h.result(d, {451});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1; }));
    const std::string orphan = smx::new_ta_id();
    fs::create_directories(fs::path(h.content_path(orphan)).parent_path());
    std::ofstream(h.content_path(orphan)) << "x";
    const auto past = fs::file_time_type::clock::now() - 60s;
    for (const auto& id : {active.ta_id, deferred.ta_id, orphan})
        fs::last_write_time(h.content_path(id), past);
    REQUIRE(h.run_until([&] { return h.stat("quarantined") == 1; }, 5000ms));
    CHECK(fs::exists(h.dir / "quarantine" / ("cdb-" + orphan)));
    CHECK(fs::exists(h.content_path(active.ta_id)));
    CHECK(fs::exists(h.content_path(deferred.ta_id)));
}

TEST_CASE("one delay warning after delay_warning_time; the message is still delivered") {
    Harness h;
    h.stop();
    h.cfg.queue.delay_warning_time = 1s;
    h.cfg.queue.retry_min = h.cfg.queue.retry_max = 1s;
    h.start();
    h.connect_smtpc();
    const auto e = h.commit({"a@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {451});  // too early for a warning
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }, 5000ms));
    CHECK(h.stat("dsn_sent") == 0);
    h.result(h.delivers[1], {451});
    REQUIRE(h.run_until([&] { return h.stat("dsn_sent") == 1; }));
    REQUIRE(h.run_until([&] { return h.delivers.size() == 3; }, 5000ms));
    h.result(h.delivers[2], {451});  // warned once is enough
    REQUIRE(h.run_until([&] { return h.delivers.size() == 4; }, 5000ms));
    h.result(h.delivers[3], {250});
    CHECK(h.stat("dsn_sent") == 1);
    CHECK(h.stat("delivered") == 1);
    // The warning (to s@example.org: no route here, so it waits) says delayed.
    std::string warning;
    for (const auto& f : fs::recursive_directory_iterator(h.dir / "cdb"))
        if (f.is_regular_file() && f.path().filename() != e.ta_id) {
            std::ifstream in(f.path());
            warning.assign(std::istreambuf_iterator<char>(in), {});
        }
    CHECK(warning.find("Action: delayed") != std::string::npos);
    CHECK(warning.find("Final-Recipient: rfc822; a@example.net") != std::string::npos);
    CHECK(warning.find("Delayed Mail") != std::string::npos);
}

TEST_CASE("a missing recipient result and a lost SMTPC are not lost mail") {
    Harness h;
    h.connect_smtpc();
    h.commit({"a@example.net", "b@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.q->remove_smtpc(h.link);
    h.connect_smtpc();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    h.result(h.delivers[1], {250});  // only the first recipient answered
    CHECK(h.stat("delivered") == 1);
    CHECK(h.stat("deferred") == 1);
}

TEST_CASE("no route defers with a clear reason") {
    Harness h;
    h.connect_smtpc();
    h.commit({"x@example.org"});
    h.run_until([&] { return false; }, 20ms);
    CHECK(h.delivers.empty());
    CHECK(h.stat("deferred") == 1);
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1; }));
}

TEST_CASE("TA_COMMIT is checked at the boundary") {
    Harness h;
    auto reject = [&](smx::msg::TaCommit e) {
        h.acks.clear();
        h.q->on_commit(e, 1, [&](std::string f) { h.acks.push_back(decode_frame<smx::msg::TaAck>(f)); });
        REQUIRE(h.acks.size() == 1);  // answered at once, nothing logged
        return h.acks[0];
    };
    smx::msg::TaCommit e;
    e.ta_id = "../../etc/passwd";
    e.content_id = e.ta_id;
    e.rcpts = {{"a@example.net", ""}};
    CHECK(reject(e).status == smx::msg::AckStatus::reject);
    e.ta_id = e.content_id = smx::new_ta_id();
    const auto missing = reject(e);  // no content file: the client may try again
    CHECK(missing.status == smx::msg::AckStatus::tempfail);
    CHECK(missing.text.find("Content file missing") != std::string::npos);
    e.rcpts.clear();
    CHECK(reject(e).text.find("no recipients") != std::string::npos);
    CHECK(h.stat("commit_rejected") == 2);
    CHECK(h.stat("ibdb_records") == 0);
}

TEST_CASE("a TA_COMMIT may name only its own content, as SMTPS made it") {
    Harness h;
    auto answer = [&](const smx::msg::TaCommit& e) {
        h.acks.clear();
        h.q->on_commit(e, 1, [&](std::string f) { h.acks.push_back(decode_frame<smx::msg::TaAck>(f)); });
        REQUIRE(h.run_until([&] { return !h.acks.empty(); }));
        return h.acks[0];
    };
    const auto other = h.commit({"a@example.net"});  // a transaction with its file
    REQUIRE(h.acks.back().status == smx::msg::AckStatus::ok);
    smx::msg::TaCommit e;
    e.ta_id = smx::new_ta_id();
    e.rcpts = {{"a@example.net", ""}};
    // Another transaction's content file: refused, not even looked at.
    e.content_id = other.ta_id;
    e.size = other.size;
    auto r = answer(e);
    CHECK(r.status == smx::msg::AckStatus::reject);
    CHECK(r.text.find("content file of another transaction") != std::string::npos);
    // An id of the queue manager's stream (its DSNs): never SMTPS's.
    smx::set_id_stream(smx::qmgr_id_stream);
    const std::string ours = smx::new_ta_id();
    smx::set_id_stream(0);
    e.ta_id = e.content_id = ours;
    CHECK(answer(e).text.find("transaction id of another stream") != std::string::npos);
    // A file under its own name that is no message of the right size: a
    // link to another's file, a FIFO, a hard link, another size.
    e.ta_id = e.content_id = smx::new_ta_id();
    fs::create_directories(fs::path(h.content_path(e.ta_id)).parent_path());
    fs::create_symlink(h.content_path(other.ta_id), h.content_path(e.ta_id));
    r = answer(e);
    CHECK(r.status == smx::msg::AckStatus::tempfail);
    CHECK(r.text.find("a symbolic link") != std::string::npos);
    fs::remove(h.content_path(e.ta_id));
    REQUIRE(::mkfifo(h.content_path(e.ta_id).c_str(), 0600) == 0);
    CHECK(answer(e).text.find("a FIFO") != std::string::npos);  // and nothing blocked
    fs::remove(h.content_path(e.ta_id));
    fs::create_hard_link(h.content_path(other.ta_id), h.content_path(e.ta_id));
    CHECK(answer(e).text.find("2 hard links") != std::string::npos);
    fs::remove(h.content_path(e.ta_id));
    std::ofstream(h.content_path(e.ta_id)) << "Subject: x\r\n\r\nbody\r\n";
    e.size = 1u << 30;
    CHECK(answer(e).text.find("bytes, 1073741824 expected") != std::string::npos);
    e.size = fs::file_size(h.content_path(e.ta_id));
    CHECK(answer(e).status == smx::msg::AckStatus::ok);
    CHECK(h.stat("ibdb_records") >= 2);
}

TEST_CASE("a deferral copy is QMGR's own: a file SMTPS's account planted does not stand in") {
    Harness h;
    smx::msg::TaCommit e;
    e.ta_id = smx::new_ta_id();
    e.content_id = smx::content::segment_ref(smx::new_ta_id(), 0);
    fs::create_directories(fs::path(h.content_path(e.ta_id)).parent_path());
    std::ofstream(h.content_path(e.ta_id)) << "planted";
    e.size = 7;
    const uid_t me = ::geteuid();
    // Here one account is both writers; as the MCP runs them they are two.
    CHECK(smx::qmgr::has_defedb_copy({h.cfg.content_dir_abs(), true, {me, me}}, e));
    CHECK_FALSE(smx::qmgr::has_defedb_copy({h.cfg.content_dir_abs(), true, {me, me + 1}}, e));
    e.size = 8;
    CHECK_FALSE(smx::qmgr::has_defedb_copy({h.cfg.content_dir_abs(), true, {me, me}}, e));
}

TEST_CASE("content SMTPC finds unusable quarantines its transaction at once") {
    Harness h;
    h.connect_smtpc();
    const auto e = h.commit({"a@example.net", "b@example.net"});
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    smx::msg::Result r;
    r.da_id = h.delivers[0].da_id;
    for (const auto& rc : h.delivers[0].rcpts) r.rcpts.push_back({rc.idx, 451, "4.3.0", "queue file"});
    r.content_error = "queue file " + e.ta_id + ": a symbolic link";
    h.q->on_result(h.link, r);
    const std::string saved = h.cfg.quarantine_dir_abs() + "/" + e.ta_id + ".envelope";
    REQUIRE(h.run_until([&] { return fs::exists(saved) && !fs::exists(h.content_path(e.ta_id)); }));
    CHECK(h.stat("quarantined") == 1);
    CHECK(h.stat("queue_transactions") == 0);
    CHECK(h.stat("deferred") == 0);
    CHECK(h.stat("bounced") == 0);
    CHECK(h.ctl("show", {e.ta_id}).status == 1);  // gone from the queue
}

TEST_CASE("a TA_COMMIT naming a content segment record is checked against the record") {
    Harness h;
    const std::string content = h.cfg.content_dir_abs();
    fs::create_directories(smx::content::segments_dir(content));
    const std::string seg = smx::new_ta_id(), a = smx::new_ta_id(), b = smx::new_ta_id();
    const std::string ma = "Subject: a\r\n\r\nbody a\r\n", mb = "Subject: b\r\n\r\nbody b, longer\r\n";
    const int fd = ::open(smx::content::segment_path(content, seg).c_str(), O_RDWR | O_CREAT, 0640);
    REQUIRE(fd >= 0);
    const std::uint64_t off_b = smx::content::segment_header_size + ma.size();
    REQUIRE(smx::content::write_segment_record(fd, 0, a, ma) == 0);
    REQUIRE(smx::content::write_segment_record(fd, off_b, b, mb) == 0);
    ::close(fd);
    auto ack = [&](const std::string& ta, const std::string& content, std::uint64_t size) {
        smx::msg::TaCommit e;
        e.ta_id = ta;
        e.content_id = content;
        e.size = size;
        e.rcpts = {{"a@example.net", ""}};
        h.acks.clear();
        h.q->on_commit(e, 1, [&](std::string f) { h.acks.push_back(decode_frame<smx::msg::TaAck>(f)); });
        REQUIRE(h.run_until([&] { return !h.acks.empty(); }));
        return h.acks[0];
    };
    using smx::msg::AckStatus;
    // Another transaction's record, the wrong size, no record there.
    auto r = ack(smx::new_ta_id(), smx::content::segment_ref(seg, 0), ma.size());
    CHECK(r.status == AckStatus::tempfail);
    CHECK(r.text.find("the record of another transaction") != std::string::npos);
    r = ack(b, smx::content::segment_ref(seg, off_b), mb.size() + 1);
    CHECK(r.text.find("expected") != std::string::npos);
    // A size over what any record can be is refused outright.
    CHECK(ack(b, smx::content::segment_ref(seg, off_b), std::uint64_t{1} << 40).status ==
          AckStatus::reject);
    r = ack(b, smx::content::segment_ref(seg, 5), mb.size());
    CHECK(r.status == AckStatus::tempfail);
    CHECK(r.text.find("Content record") != std::string::npos);
    // A segment that is not there; one made longer ago than segment_age.
    r = ack(b, smx::content::segment_ref(smx::new_ta_id(), 0), mb.size());
    CHECK(r.text.find("Content record: No such file") != std::string::npos);
    char old[32];
    std::snprintf(old, sizeof old, "%08llX%05X%04X",
                  static_cast<unsigned long long>(smx::now_us() / 1000000 - 3600), 0, 1);
    r = ack(b, smx::content::segment_ref(old, 0), mb.size());
    CHECK(r.text.find("too old") != std::string::npos);
    CHECK(ack(b, smx::content::segment_ref(seg, 0) + "0", mb.size()).status == AckStatus::reject);
    CHECK(h.stat("ibdb_records") == 0);
    // Its own record: taken.
    CHECK(ack(a, smx::content::segment_ref(seg, 0), ma.size()).status == AckStatus::ok);
    CHECK(ack(b, smx::content::segment_ref(seg, off_b), mb.size()).status == AckStatus::ok);
}

TEST_CASE("a full active queue tempfails intake") {
    Harness h;
    h.cfg.queue.aq_max_entries = 3;
    h.commit({"a@example.net", "b@example.net"});
    CHECK(h.acks.back().status == smx::msg::AckStatus::ok);
    h.commit({"a@example.net", "b@example.net"});
    CHECK(h.acks.back().status == smx::msg::AckStatus::tempfail);
    CHECK(h.acks.back().text == "4.3.1 Insufficient system storage");
    h.commit({"c@example.net"});
    CHECK(h.acks.back().status == smx::msg::AckStatus::ok);
}

TEST_CASE("recovery puts open recipients back and drops a transaction without content") {
    Harness h;
    auto keep = h.commit({"a@example.net", "b@example.net", "c@example.net"});
    auto lost = h.commit({"c@example.net"});
    fs::remove(h.content_path(lost.ta_id));
    h.connect_smtpc();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    for (const auto& d : h.delivers)
        if (d.ta_id == keep.ta_id) h.result(d, {250, 451, 0});  // c: no answer yet... then crash
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 2; }));
    // Restart: a new Qmgr, IBDB and DEFEDB over the same spool.
    h.stop();
    h.delivers.clear();
    h.start();
    CHECK(h.stat("queue_transactions") == 0);  // a done; b and c in DEFEDB
    CHECK(fs::exists(h.dir / "quarantine" / (lost.ta_id + ".envelope")));
    CHECK(h.ctl("queue").text.find("b@example.net (deferred") != std::string::npos);
    h.connect_smtpc();
    CHECK(h.ctl("flush").text.find("2 deferred") != std::string::npos);
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    REQUIRE(h.delivers[0].rcpts.size() == 2);
    CHECK(h.delivers[0].rcpts[0].addr == "b@example.net");
}

TEST_CASE("recovery quarantines a transaction whose content file is shorter than its envelope says") {
    // A power cut during a batch syncfs: the envelope reached the disk, its
    // content only in part (no 250 was sent). Never deliver it truncated.
    Harness h;
    auto whole = h.commit({"a@example.net"});
    auto cut = h.commit({"b@example.net"});
    h.stop();
    fs::resize_file(h.content_path(cut.ta_id), cut.size - 3);
    h.start();
    CHECK(h.stat("quarantined") == 1);
    CHECK(fs::exists(h.dir / "quarantine" / (cut.ta_id + ".envelope")));
    CHECK(fs::file_size(h.dir / "quarantine" / ("cdb-" + cut.ta_id)) == cut.size - 3);
    CHECK_FALSE(fs::exists(h.content_path(cut.ta_id)));
    h.connect_smtpc();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    CHECK(h.delivers[0].ta_id == whole.ta_id);
    h.run_until([&] { return false; }, 100ms);
    CHECK(h.delivers.size() == 1);
}

TEST_CASE("a recipient in DEFEDB that IBDB still has open is delivered once, and nothing is left") {
    Harness h;
    auto e = h.commit({"a@example.net"});
    // As if QMGR died after the DEFEDB commit, before IBDB's deferred record.
    DeferredRcpt r;
    r.ta_id = e.ta_id;
    r.addr = "a@example.net";
    r.attempts = 1;
    r.first_arrival_us = e.arrival_us;
    r.next_try_us = smx::now_us();
    h.defedb->put_deferred(e, r);
    h.stop();
    h.start();
    h.connect_smtpc();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 1; }));
    h.result(h.delivers[0], {250});
    REQUIRE(h.run_until([&] { return !fs::exists(h.content_path(e.ta_id)); }));
    h.run_until([&] { return false; }, 200ms);
    CHECK(h.delivers.size() == 1);
    CHECK(h.defedb->count() == 0);
}

TEST_CASE("control: stats and unknown commands") {
    Harness h;
    auto r = h.ctl("stats");
    CHECK(r.status == 0);
    for (const char* name : {"received ", "delivered ", "deferred ", "bounced ", "dsn_sent ", "ibdb_commits ",
                             "ibdb_transactions ", "ibdb_records ", "fsync_seconds ",
                             "fsync_seconds_max ", "rejected ",
                             "queue_size ", "queue_transactions ", "active_deliveries ",
                             "smtpc_connections ", "smtps_connections ", "smtps_sessions ",
                             "smtps_transactions ", "smtps_transactions_waiting "})
        CHECK(("\n" + r.text).find(std::string("\n") + name) != std::string::npos);
    auto bad = h.ctl("frobnicate");
    CHECK(bad.status == 1);
    CHECK(bad.text.find("frobnicate") != std::string::npos);
}

// The clock seam: what QMGR decides from time, with time moved by the test.
namespace {
// A harness on a test clock with one message delivered once (not answered).
struct Timed : Harness {
    explicit Timed(std::function<void(smx::QueueConfig&)> set) {
        stop();
        fake_time = true;
        set(cfg.queue);
        start();
        connect_smtpc();
        commit({"a@example.net"});
        REQUIRE(run_until([&] { return delivers.size() == 1; }));
    }
    void settle() { run_until([] { return false; }, 200ms); }
};
} // namespace

TEST_CASE("clock: a temporary failure past max_queue_lifetime bounces, before it defers") {
    Timed h([](smx::QueueConfig& q) { q.max_queue_lifetime = std::chrono::hours(24); });
    h.cfg.routes["example.org"] = h.cfg.routes["example.net"];
    SECTION("a minute before the lifetime ends: deferred") {
        h.fake_clock.advance(std::chrono::hours(24) - std::chrono::minutes(1));
        h.result(h.delivers[0], {451});
        h.settle();
        CHECK(h.stat("deferred") == 1);
        CHECK(h.stat("bounced") == 0);
    }
    SECTION("at the end of the lifetime: bounced with 4.4.7") {
        h.fake_clock.advance(std::chrono::hours(24));
        h.result(h.delivers[0], {451});
        REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
        CHECK(h.stat("deferred") == 0);
        CHECK(h.stat("bounced") == 1);
        CHECK(h.delivers[1].sender.empty());
        std::ifstream in(h.content_path(h.delivers[1].content_id), std::ios::binary);
        const std::string body((std::istreambuf_iterator<char>(in)), {});
        CHECK(body.find("Status: 4.4.7") != std::string::npos);
    }
}

TEST_CASE("clock: a clock stepped back since arrival does not make a temporary failure expire") {
    Timed h([](smx::QueueConfig& q) { q.max_queue_lifetime = std::chrono::hours(24); });
    h.fake_clock.advance(-std::chrono::minutes(1));  // an NTP step back
    h.result(h.delivers[0], {451});
    REQUIRE(h.run_until([&] { return h.stat("deferred") == 1; }));
    CHECK(h.stat("bounced") == 0);
}

TEST_CASE("clock: a delay warning only once delay_warning_time has passed") {
    Timed h([](smx::QueueConfig& q) { q.delay_warning_time = std::chrono::hours(4); });
    SECTION("deferred before delay_warning_time: no warning") {
        h.fake_clock.advance(std::chrono::hours(3));
        h.result(h.delivers[0], {451});
        h.settle();
        CHECK(h.stat("deferred") == 1);
        CHECK(h.stat("dsn_sent") == 0);
    }
    SECTION("deferred after it: one warning") {
        h.fake_clock.advance(std::chrono::hours(4));
        h.result(h.delivers[0], {451});
        REQUIRE(h.run_until([&] { return h.stat("dsn_sent") == 1; }));
        CHECK(h.stat("bounced") == 0);  // the warning itself waits: no route to the sender
    }
}

TEST_CASE("clock: a deferred recipient comes back when its backoff has passed, not before") {
    Timed h([](smx::QueueConfig& q) {
        q.retry_min = std::chrono::hours(1);
        q.retry_max = std::chrono::hours(8);
    });
    h.result(h.delivers[0], {451});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1 && h.stat("queue_size") == 0; }));
    // A restart arms the due timer against the clock afresh.
    const auto restart = [&] {
        h.stop();
        h.start();
        h.connect_smtpc();
    };
    h.fake_clock.advance(std::chrono::minutes(59));
    restart();
    h.settle();
    CHECK(h.delivers.size() == 1);
    h.fake_clock.advance(std::chrono::minutes(1));
    restart();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 2; }));
    h.result(h.delivers[1], {451});  // attempt 2: two hours (retry_min doubled)
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1 && h.stat("queue_size") == 0; }));
    h.fake_clock.advance(std::chrono::minutes(119));
    restart();
    h.settle();
    CHECK(h.delivers.size() == 2);
    h.fake_clock.advance(std::chrono::minutes(1));
    restart();
    REQUIRE(h.run_until([&] { return h.delivers.size() == 3; }));
    h.result(h.delivers[2], {250});
    CHECK(h.stat("delivered") == 1);
}

TEST_CASE("content_dir and ibdb_dir outside the spool: delivery, bounce, recovery and quarantine") {
    // The content on another file system where there is one (/dev/shm is a
    // tmpfs on Linux): moves into the spool's quarantine/ are then copies.
    fs::path other = "/dev/shm";
    struct stat a, b;
    const bool cross = ::stat(other.c_str(), &a) == 0 &&
                       ::stat(fs::temp_directory_path().c_str(), &b) == 0 && a.st_dev != b.st_dev;
    if (!cross) {
        WARN("no second file system: content and quarantine share one (rename, not copy)");
        other = fs::temp_directory_path();
    }
    const fs::path content = other / ("smx-content-" + smx::new_ta_id());
    Harness h;
    h.stop();
    h.cfg.queue.content_dir = content.string();
    h.cfg.queue.ibdb_dir = (h.dir.parent_path() / (h.dir.filename().string() + "-ibdb")).string();
    h.cfg.routes["example.org"] = h.cfg.routes["example.net"];
    h.start();
    REQUIRE(h.content_path("X").rfind(content.string() + "/", 0) == 0);
    h.connect_smtpc();
    const auto ok = h.commit({"a@example.net"});
    const auto failed = h.commit({"b@example.net"});
    const auto cut = h.commit({"c@example.net"});
    CHECK(fs::exists(h.cfg.ibdb_dir_abs() + "/00000001.log"));
    CHECK(fs::is_empty(h.dir / "ibdb"));  // made by the first start(), with the defaults
    CHECK_FALSE(fs::exists(h.dir / "cdb"));
    REQUIRE(h.run_until([&] { return h.delivers.size() == 3; }));
    for (const auto& d : h.delivers) {
        if (d.ta_id == ok.ta_id) h.result(d, {250});
        if (d.ta_id == failed.ta_id) h.result(d, {550});
    }
    // The DSN's content goes to content_dir too; the finished ones are gone.
    REQUIRE(h.run_until([&] {
        return h.stat("dsn_sent") == 1 && !fs::exists(h.content_path(ok.ta_id)) &&
               !fs::exists(h.content_path(failed.ta_id));
    }));
    std::size_t files = 0;
    for (const auto& f : fs::recursive_directory_iterator(content))
        files += f.is_regular_file();
    CHECK(files == 2);  // cut, the DSN
    h.stop();

    // cut is short after a power cut; an orphan lies beside it.
    fs::resize_file(h.content_path(cut.ta_id), cut.size - 1);
    const std::string orphan = smx::new_ta_id();
    fs::create_directories(fs::path(h.content_path(orphan)).parent_path());
    std::ofstream(h.content_path(orphan)) << "orphan";
    fs::last_write_time(h.content_path(orphan), fs::file_time_type::clock::now() - h.cfg.queue.orphan_age - 1s);
    h.delivers.clear();
    h.start();
    REQUIRE(h.run_until([&] { return h.stat("quarantined") == 2; }));
    CHECK(fs::file_size(h.dir / "quarantine" / ("cdb-" + cut.ta_id)) == cut.size - 1);
    CHECK(fs::exists(h.dir / "quarantine" / (cut.ta_id + ".envelope")));
    CHECK(fs::file_size(h.dir / "quarantine" / ("cdb-" + orphan)) == 6);
    CHECK_FALSE(fs::exists(h.content_path(cut.ta_id)));
    CHECK_FALSE(fs::exists(h.content_path(orphan)));
    CHECK(h.stat("quarantine_write_failures") == 0);
    // The DSN, recovered from the other IBDB directory, is still there to go.
    CHECK(h.stat("queue_transactions") == 1);
    h.stop();
    fs::remove_all(content);
    fs::remove_all(h.cfg.ibdb_dir_abs());
}

TEST_CASE("smx-pickup names ids of its own stream only, and a commit it repeats is refused while "
          "memory or DEFEDB holds the transaction") {
    Harness h;
    h.connect_smtpc();
    auto answer = [&](const smx::msg::TaCommit& e, Qmgr::From from) {
        h.acks.clear();
        h.q->on_commit(e, 1, [&](std::string f) { h.acks.push_back(decode_frame<smx::msg::TaAck>(f)); },
                       from);
        REQUIRE(h.run_until([&] { return !h.acks.empty(); }));
        return h.acks[0];
    };
    auto with_file = [&](const std::string& id) {
        smx::msg::TaCommit e;
        e.ta_id = e.content_id = id;
        e.sender = "alice@host.example";
        e.client_addr = "127.0.0.1";
        e.arrival_us = h.clock().now_us();
        e.rcpts = {{"a@example.net", ""}};
        fs::create_directories(fs::path(h.content_path(id)).parent_path());
        std::ofstream(h.content_path(id)) << "Subject: local\r\n\r\nbody\r\n";
        e.size = fs::file_size(h.content_path(id));
        return e;
    };
    smx::set_id_stream(smx::pickup_id_stream);
    const auto local = with_file(smx::new_ta_id());
    smx::set_id_stream(0);
    // SMTPS may not name pickup's ids, nor pickup SMTPS's.
    auto r = answer(local, Qmgr::From::smtps);
    CHECK(r.status == smx::msg::AckStatus::reject);
    CHECK(r.text.find("transaction id of another stream") != std::string::npos);
    r = answer(with_file(smx::new_ta_id()), Qmgr::From::pickup);
    CHECK(r.status == smx::msg::AckStatus::reject);
    CHECK(r.text.find("transaction id of another stream") != std::string::npos);
    // Its own: taken; the same again (pickup restarted before it read the
    // ack) is a duplicate while the transaction is in memory...
    CHECK(answer(local, Qmgr::From::pickup).status == smx::msg::AckStatus::ok);
    r = answer(local, Qmgr::From::pickup);
    CHECK(r.status == smx::msg::AckStatus::reject);
    CHECK(r.text.find(smx::msg::duplicate_ta) != std::string::npos);
    // ...and once only DEFEDB holds it.
    REQUIRE(h.run_until([&] { return !h.delivers.empty(); }));
    h.result(h.delivers.back(), {451});
    REQUIRE(h.run_until([&] { return h.stat("queue_deferred") == 1 && h.stat("queue_transactions") == 0; }));
    r = answer(local, Qmgr::From::pickup);
    CHECK(r.status == smx::msg::AckStatus::reject);
    CHECK(r.text.find(smx::msg::duplicate_ta) != std::string::npos);
    CHECK(h.stat("received") == 1);
}
