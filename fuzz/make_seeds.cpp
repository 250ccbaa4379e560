// Writes the binary seeds of fuzz/corpus/ with the real encoders:
//   fuzz-make-seeds DIR   (DIR/record, DIR/maildrop_file, DIR/ibdb_recovery,
//                          DIR/defedb_record)
// The committed corpus was made with it; rerun it after a format change.
#include "libsm/maildrop_file.hpp"
#include "libsm/messages.hpp"
#include "qmgr/defedb_record.hpp"
#include "qmgr/ibdb_record.hpp"

#include <filesystem>
#include <fstream>
#include <iostream>

namespace fs = std::filesystem;
using namespace smx::msg;

namespace {

void put(const fs::path& dir, const std::string& name, const std::string& bytes) {
    fs::create_directories(dir);
    std::ofstream(dir / name, std::ios::binary) << bytes;
}

TaCommit sample() {
    TaCommit t;
    t.ta_id = t.content_id = "6B05B3564B3F00000";
    t.client_addr = "192.0.2.1";
    t.client_name = "unknown";
    t.helo = "client.example";
    t.sender = "sender@example.org";
    t.params = "SIZE=100 BODY=8BITMIME";
    t.rcpts = {{"a@example.net", ""}, {"b@example.net", "NOTIFY=NEVER"}};
    t.size = 1234;
    t.arrival_us = 1'795'374'022'000'000;
    return t;
}

} // namespace

int main(int argc, char** argv) {
    if (argc != 2) {
        std::cerr << "usage: fuzz-make-seeds DIR\n";
        return 2;
    }
    const fs::path out = argv[1];
    const TaCommit ta = sample();
    put(out / "record", "hello", encode(Hello{"smtps", protocol_version, 42}));
    put(out / "record", "ta_commit", encode(ta, 7));
    TaCommit in_segment = ta;
    in_segment.content_id = "6B05B3564B3E00001+1A28";
    put(out / "record", "ta_commit_segment", encode(in_segment, 8));
    put(out / "record", "ta_ack", encode(TaAck{ta.ta_id, AckStatus::tempfail, "4.3.0 x"}, 7));
    put(out / "record", "smtps_load", encode(SmtpsLoad{1, 1000, 100, 7}));
    put(out / "record", "deliver",
        encode(Deliver{9, ta.ta_id, ta.content_id, ta.sender, ta.size,
                       {{0, "a@example.net", ""}, {1, "b@example.net", ""}}, {"[127.0.0.1]:25", "mx"}, ""}));
    put(out / "record", "result",
        encode(Result{9, "mx[192.0.2.2]:25", {{0, 250, "2.0.0", "Ok"}, {1, 550, "5.1.1", "no"}}}, 9));
    put(out / "record", "ctl", encode(CtlRequest{"hold", {ta.ta_id}}, 3));

    smx::maildrop::Envelope drop;
    drop.uid = 1000;
    drop.arrival_us = ta.arrival_us;
    drop.sender = "alice@example.org";
    drop.rcpts = {"a@example.net", "b@example.net"};
    const std::string content = "Subject: hi\r\n\r\nhello\r\n";
    drop.content_size = content.size();
    put(out / "maildrop_file", "file", smx::maildrop::encode(drop, smx::maildrop::Kind::file) + content);
    put(out / "maildrop_file", "submission",
        smx::maildrop::encode(drop, smx::maildrop::Kind::submission) + content);
    put(out / "maildrop_file", "bare_lf",
        smx::maildrop::encode(drop, smx::maildrop::Kind::file) + "Subject: hi\n\nhello\r\n\r\n");

    namespace ibdb = smx::qmgr::ibdb;
    std::string log;
    ibdb::append_record(log, ibdb::transaction, envelope_bytes(ta));
    ibdb::append_record(log, ibdb::rcpt_done, ibdb::ref_payload(ta.ta_id, 0));
    ibdb::append_record(log, ibdb::rcpt_deferred, ibdb::ref_payload(ta.ta_id, 1));
    put(out / "ibdb_recovery", "open", log);
    ibdb::append_record(log, ibdb::ta_done, ibdb::ref_payload(ta.ta_id, std::nullopt));
    put(out / "ibdb_recovery", "done", log);
    put(out / "ibdb_recovery", "torn", log.substr(0, log.size() - 3));

    namespace d = smx::qmgr::defedb;
    smx::qmgr::DeferredRcpt r;
    r.ta_id = ta.ta_id;
    r.idx = 1;
    r.addr = "b@example.net";
    r.attempts = 3;
    r.next_try_us = ta.arrival_us + 600'000'000;
    r.first_arrival_us = ta.arrival_us;
    r.last_attempt_us = ta.arrival_us + 300'000'000;
    r.last_reply = {451, "4.3.0", "try later"};
    r.last_relay = "mx.example.net[192.0.2.1]:25";
    r.warned = true;
    const std::string key = d::rcpt_key(r.ta_id, r.idx);
    put(out / "defedb_record", "rcpt",
        std::string(1, static_cast<char>(key.size())) + key + d::encode_rcpt(r));
    put(out / "defedb_record", "envelope", std::string(1, '\0') + d::encode_envelope(ta));
    return 0;
}
