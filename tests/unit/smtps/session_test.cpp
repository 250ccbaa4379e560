// SMTPS sessions over real TCP against a fake QMGR.
#include "tests/unit/smtps/harness.hpp"

#include <catch2/catch.hpp>

#include <sys/statvfs.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <thread>

using namespace smtps_test;

namespace {

bool starts(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// The Received: header SMTPS prepends, up to the date, and the rest.
std::pair<std::string, std::string> split_received(const std::string& file) {
    const auto end = file.find("\r\n", file.find("\r\n\tfor ") + 2);
    return {file.substr(0, end + 2), file.substr(end + 2)};
}

void ehlo(Client& c) {
    REQUIRE(starts(c.reply(), "220 mx.test ESMTP smx"));
    REQUIRE(starts(c.cmd("EHLO client.test"), "250-mx.test"));
}

} // namespace

TEST_CASE("stale temporary content files are removed at start-up") {
    Harness h;
    const std::string id = "0123456789ABCDEF0";
    const std::string tmp = h.content_path(id) + ".tmp";
    std::filesystem::create_directories(std::filesystem::path(tmp).parent_path());
    { std::ofstream(tmp) << "partial"; }
    { std::ofstream(h.content_path(id)) << "complete"; }
    asio::thread_pool pool(1);
    smx::smtps::ContentStore store(h.cfg().content_dir_abs(), true, pool);
    CHECK(store.remove_stale_tmp() == 1);
    CHECK(h.content_files() == std::vector<std::string>{h.content_path(id)});
}

// The account's arithmetic is tested with its own gauges (libsm
// space_account_test.cpp); here the store on a real file system.
TEST_CASE("the free-space reserve: a declared SIZE must fit above it") {
    Harness h;
    asio::thread_pool pool(1);
    std::filesystem::create_directories(h.cfg().spool_dir_abs());
    struct statvfs vfs;
    REQUIRE(::statvfs(h.cfg().spool_dir_abs().c_str(), &vfs) == 0);
    const std::uint64_t free = static_cast<std::uint64_t>(vfs.f_bavail) * vfs.f_frsize;
    REQUIRE(free > (64u << 20));
    smx::smtps::ContentStore none(h.cfg().spool_dir_abs(), true, pool, 0);
    CHECK(none.has_room(UINT64_MAX / 2));  // 0: no check
    // Half the free space as reserve leaves room for a quarter of it but
    // not for three quarters (slack for other writers on this machine).
    smx::smtps::ContentStore half(h.cfg().spool_dir_abs(), true, pool, free / 2);
    CHECK(half.has_room(0));
    CHECK(half.has_room(free / 4));
    CHECK_FALSE(half.has_room(free / 4 * 3));
    // A claim holds its bytes until it ends.
    auto claim = half.claim(free / 3, 0);
    CHECK(claim);
    CHECK_FALSE(half.has_room(free / 3));
    claim.reset();
    CHECK(half.has_room(free / 3));
    smx::smtps::ContentStore all(h.cfg().spool_dir_abs(), true, pool, free * 2);
    CHECK_FALSE(all.has_room(0));
}

TEST_CASE("queue.content_dir: content files go there, not into the spool") {
    const auto content = std::filesystem::temp_directory_path() /
                         ("smtps-content-" + std::to_string(::getpid()));
    Harness h([&](smx::Config& c) {
        c.queue.content_dir = content.string();
        c.queue.content_sync = smx::QueueConfig::ContentSync::file;
    });
    Client c(h.port());
    ehlo(c);
    const std::string r = send_message(c, "sender@a.test", {"rcpt@b.test"}, "Subject: x\r\n\r\nbody\r\n.\r\n");
    REQUIRE(starts(r, "250 2.0.0 Ok: queued as "));
    const std::string path = h.content_path(queued_id(r));
    CHECK(starts(path, content.string() + "/"));
    CHECK(read_file(path).find("\r\nbody\r\n") != std::string::npos);
    CHECK(h.content_files() == std::vector<std::string>{path});
    CHECK_FALSE(std::filesystem::exists(std::filesystem::path(h.cfg().spool_dir_abs()) / "cdb"));
    std::filesystem::remove_all(content);
}

TEST_CASE("greeting and EHLO keywords") {
    Harness h([](smx::Config& c) { c.server.max_message_size = 12345; });
    Client c(h.port());
    CHECK(c.reply() == "220 mx.test ESMTP smx");
    const std::string e = c.cmd("EHLO client.test");
    CHECK(e == "250-mx.test\n250-PIPELINING\n250-SIZE 12345\n250-8BITMIME\n250-CHUNKING\n"
               "250-SMTPUTF8\n250-DSN\n250 ENHANCEDSTATUSCODES");
    CHECK(c.cmd("HELO client.test") == "250 mx.test");
    CHECK(starts(c.cmd("NOOP"), "250 2.0.0"));
    CHECK(starts(c.cmd("VRFY someone"), "252 2.5.2"));
    CHECK(starts(c.cmd("HELP"), "214"));
    CHECK(starts(c.cmd("RSET"), "250 2.0.0"));
    CHECK(starts(c.cmd("EHLO"), "501 5.5.4"));
    CHECK(starts(c.cmd("EHLO a\rb"), "501 5.5.4"));
    CHECK(starts(c.cmd("XBDAT 10"), "500 5.5.2"));
    CHECK(starts(c.cmd("quit"), "221 2.0.0"));
    CHECK(c.closed());
}

TEST_CASE("a message is stored byte-exact with dot-unstuffing and committed") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    const std::string sent =
        "Subject: dots\r\n\r\n..leading dot\r\n...two\r\nmiddle . dot\r\n.x\r\n\r\nend\r\n.\r\n";
    const std::string stored =
        "Subject: dots\r\n\r\n.leading dot\r\n..two\r\nmiddle . dot\r\nx\r\n\r\nend\r\n";
    const std::string r = send_message(c, "sender@a.test", {"rcpt@b.test"}, sent);
    REQUIRE(starts(r, "250 2.0.0 Ok: queued as "));
    const std::string id = queued_id(r);
    const std::string file = read_file(h.content_path(id));
    const auto [received, content] = split_received(file);
    CHECK(content == stored);
    CHECK(starts(received, "Received: from client.test (unknown [127.0.0.1])\r\n"
                           "\tby mx.test (smx) with ESMTP id " + id + "\r\n"
                           "\tfor <rcpt@b.test>; "));
    CHECK(received.size() < 200);
    const auto commits = h.commits();
    REQUIRE(commits.size() == 1);
    const auto& ta = commits[0];
    CHECK(ta.ta_id == id);
    CHECK(ta.content_id == id);
    CHECK(ta.sender == "sender@a.test");
    REQUIRE(ta.rcpts.size() == 1);
    CHECK(ta.rcpts[0].addr == "rcpt@b.test");
    CHECK(ta.helo == "client.test");
    CHECK(ta.client_addr == "127.0.0.1");
    CHECK(ta.size == file.size());
    CHECK(h.content_files().size() == 1);  // no temporary file left
    CHECK(starts(c.cmd("QUIT"), "221"));
}

TEST_CASE("an empty message and a message without final CRLF before the dot") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    std::string r = send_message(c, "", {"x@b.test"}, ".\r\n");  // null sender, empty body
    REQUIRE(starts(r, "250 2.0.0"));
    CHECK(split_received(read_file(h.content_path(queued_id(r)))).second.empty());
    CHECK(h.commits().back().sender.empty());
}

TEST_CASE("pipelined commands get their replies in one batch") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    c.send("MAIL FROM:<a@a.test> SIZE=100 BODY=8BITMIME\r\nRCPT TO:<b@b.test>\r\n"
           "RCPT TO:<c@c.test>\r\nDATA\r\n");
    // All four replies arrive together, the 354 last.
    std::string got;
    for (int i = 0; i < 50 && got.find("354") == std::string::npos; ++i) got += c.drain(20);
    CHECK(got == "250 2.1.0 Ok\r\n250 2.1.5 Ok\r\n250 2.1.5 Ok\r\n"
                 "354 End data with <CR><LF>.<CR><LF>\r\n");
    // The next transaction follows the final dot in the same packet.
    c.send("hello\r\n.\r\nMAIL FROM:<a2@a.test>\r\nRCPT TO:<d@d.test>\r\nDATA\r\n");
    const std::string r1 = c.reply();
    CHECK(starts(r1, "250 2.0.0 Ok: queued as "));
    CHECK(c.reply() == "250 2.1.0 Ok");
    CHECK(c.reply() == "250 2.1.5 Ok");
    CHECK(starts(c.reply(), "354"));
    c.send("second\r\n.\r\n");
    const std::string r2 = c.reply();
    CHECK(starts(r2, "250 2.0.0"));
    // Two recipients: no "for" clause.
    const std::string f1 = read_file(h.content_path(queued_id(r1)));
    CHECK(f1.find("\tfor ") == std::string::npos);
    CHECK(f1.find("id " + queued_id(r1) + ";\r\n\t") != std::string::npos);
    CHECK(f1.substr(f1.size() - 7) == "hello\r\n");
    const auto commits = h.commits();
    REQUIRE(commits.size() == 2);
    CHECK(commits[0].rcpts.size() == 2);
    CHECK(commits[0].params == "SIZE=100 BODY=8BITMIME");
    CHECK(commits[1].sender == "a2@a.test");
}

TEST_CASE("bare LF and bare CR in DATA are rejected") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "one\ntwo\r\n.\r\n"), "550 5.6.11"));
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "one\rtwo\r\n.\r\n"), "550 5.6.11"));
    // A bare-LF dot line does not end DATA (SMTP smuggling).
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"},
                              "one\r\n.\nMAIL FROM:<evil@x>\r\n.\r\n"),
                 "550 5.6.11"));
    CHECK(starts(c.cmd("NOOP"), "250"));
    CHECK(h.commits().empty());
    CHECK(h.content_files().empty());
}

TEST_CASE("bare LF and CR are normalised when configured") {
    Harness h([](smx::Config& c) { c.server.reject_bare_lf = false; });
    Client c(h.port());
    ehlo(c);
    const std::string r =
        send_message(c, "a@a.test", {"b@b.test"}, "one\ntwo\rthree\r\n\n.\nsmuggled\r\n.\r\n");
    REQUIRE(starts(r, "250 2.0.0"));
    // ".<LF>" is not the end of data; as a dot line it is unstuffed.
    CHECK(split_received(read_file(h.content_path(queued_id(r)))).second ==
          "one\r\ntwo\r\nthree\r\n\r\n\r\nsmuggled\r\n");
    CHECK(h.commits().size() == 1);
}

// content with each line over 998 octets broken by CRLF SPACE: 998 octets,
// then 997 after each space.
static std::string broken(const std::string& content) {
    std::string out;
    for (std::size_t at = 0; at < content.size();) {
        const std::size_t end = content.find("\r\n", at);
        std::string_view line = std::string_view(content).substr(at, end - at);
        out.append(line.substr(0, 998));
        for (line.remove_prefix(std::min<std::size_t>(998, line.size())); !line.empty();
             line.remove_prefix(std::min<std::size_t>(997, line.size())))
            out.append("\r\n ").append(line.substr(0, 997));
        out.append("\r\n");
        at = end + 2;
    }
    return out;
}

TEST_CASE("over-long lines: commands are refused, DATA passes them through, broken") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    CHECK(c.cmd("NOOP " + std::string(600, 'x')) == "500 5.5.2 Error: line too long");
    CHECK(starts(c.cmd("NOOP"), "250"));
    std::string long_line(200000, 'a');
    long_line[70000] = '.';
    long_line[65535] = '\r';  // CRLF across the 64 KiB chunk cut of DATA lines
    long_line[65536] = '\n';
    const std::string content = "X: y\r\n\r\n" + long_line + "\r\n.." + long_line + "\r\nend\r\n";
    const std::string r = send_message(c, "a@a.test", {"b@b.test"}, content + ".\r\n");
    REQUIRE(starts(r, "250 2.0.0"));
    CHECK(split_received(read_file(h.content_path(queued_id(r)))).second ==
          broken("X: y\r\n\r\n" + long_line + "\r\n." + long_line + "\r\nend\r\n"));
}

TEST_CASE("message size limit") {
    Harness h([](smx::Config& c) { c.server.max_message_size = 1000; });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test> SIZE=1001"), "552 5.3.4"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test> SIZE=x1"), "501 5.5.4"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test> FOO=1"), "555 5.5.4"));
    const std::string big(2000, 'x');
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, big + "\r\n.\r\n"), "552 5.3.4"));
    CHECK(h.content_files().empty());
    // The session goes on, and a small message passes.
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "small\r\n.\r\n"), "250 2.0.0"));
}

TEST_CASE("relay access is denied outside relay_networks and relay_domains") {
    Harness h([](smx::Config& c) {
        c.server.relay_networks.clear();
        c.server.relay_domains = {"ok.test", ".sub.test"};
    });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(c.cmd("RCPT TO:<x@other.test>") == "554 5.7.1 <x@other.test>: Relay access denied");
    CHECK(starts(c.cmd("RCPT TO:<x@OK.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<x@a.sub.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<x@sub.test>"), "554 5.7.1"));
    CHECK(starts(c.cmd("DATA"), "354"));
    c.send("hi\r\n.\r\n");
    CHECK(starts(c.reply(), "250"));
    REQUIRE(h.commits().size() == 1);
    CHECK(h.commits()[0].rcpts.size() == 2);
}

TEST_CASE("too many recipients") {
    Harness h([](smx::Config& c) { c.server.max_recipients = 2; });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<1@b.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<2@b.test>"), "250"));
    CHECK(c.cmd("RCPT TO:<3@b.test>") == "452 4.5.3 Error: too many recipients");
}

TEST_CASE("command sequence and syntax errors") {
    Harness h([](smx::Config& c) { c.server.max_errors = 100; });
    Client c(h.port());
    REQUIRE(starts(c.reply(), "220"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "503 5.5.1"));
    CHECK(starts(c.cmd("EHLO c.test"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "503 5.5.1"));
    CHECK(starts(c.cmd("DATA"), "503 5.5.1"));
    CHECK(starts(c.cmd("MAIL TO:<a@a.test>"), "501 5.5.4"));
    CHECK(starts(c.cmd("MAIL FROM:<a@@a.test>"), "501 5.1.7"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test"), "501 5.5.4"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "503 5.5.1"));
    CHECK(starts(c.cmd("RCPT TO:<>"), "501"));
    CHECK(starts(c.cmd("RCPT TO:<no-domain>"), "501 5.1.3"));
    CHECK(starts(c.cmd("DATA"), "554 5.5.1"));
    CHECK(starts(c.cmd("RSET"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "503 5.5.1"));
}

TEST_CASE("too many errors close the session") {
    Harness h([](smx::Config& c) { c.server.max_errors = 3; });
    Client c(h.port());
    REQUIRE(starts(c.reply(), "220"));
    CHECK(starts(c.cmd("FOO"), "500"));
    CHECK(starts(c.cmd("BAR"), "500"));
    c.send("BAZ\r\n");
    CHECK(starts(c.reply(), "500"));
    CHECK(c.reply() == "421 4.7.0 mx.test Error: too many errors");
    CHECK(c.closed());
}

TEST_CASE("past max_junk_commands NOOP, VRFY, RSET and HELP count as errors; a queued message forgives them") {
    Harness h([](smx::Config& c) {
        c.server.max_junk_commands = 3;
        c.server.max_errors = 2;
    });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("NOOP"), "250"));
    CHECK(starts(c.cmd("VRFY x"), "252"));
    CHECK(starts(c.cmd("RSET"), "250"));
    // A message resets the count (a client may RSET between messages).
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "Subject: x\r\n\r\nhi\r\n.\r\n"),
                 "250 2.0.0 Ok: queued as "));
    CHECK(starts(c.cmd("RSET"), "250"));
    CHECK(starts(c.cmd("NOOP"), "250"));
    CHECK(starts(c.cmd("HELP"), "214"));
    // The fourth since: still its reply, and the first error.
    CHECK(starts(c.cmd("NOOP"), "250"));
    c.send("NOOP\r\n");
    CHECK(starts(c.reply(), "250"));
    CHECK(c.reply() == "421 4.7.0 mx.test Error: too many errors");
    CHECK(c.closed());
}

TEST_CASE("max_junk_commands = 0: every NOOP counts as an error") {
    Harness h([](smx::Config& c) {
        c.server.max_junk_commands = 0;
        c.server.max_errors = 2;
    });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("NOOP"), "250"));
    c.send("NOOP\r\n");
    CHECK(starts(c.reply(), "250"));
    CHECK(c.reply() == "421 4.7.0 mx.test Error: too many errors");
    CHECK(c.closed());
}

TEST_CASE("command and data timeouts") {
    Harness h([](smx::Config& c) {
        c.server.command_timeout = std::chrono::seconds(1);
        c.server.data_timeout = std::chrono::seconds(1);
    });
    {
        Client c(h.port());
        REQUIRE(starts(c.reply(), "220"));
        CHECK(c.reply() == "421 4.4.2 mx.test Error: timeout exceeded");
        CHECK(c.closed());
    }
    {
        Client c(h.port());
        ehlo(c);
        CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
        CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250"));
        CHECK(starts(c.cmd("DATA"), "354"));
        c.send("partial line");
        CHECK(c.reply() == "421 4.4.2 mx.test Error: timeout exceeded");
        CHECK(c.closed());
    }
    CHECK(h.content_files().empty());
}

TEST_CASE("a message past the spill size is written under its final name and removed when lost") {
    Harness h([](smx::Config& c) { c.server.data_timeout = std::chrono::seconds(3); });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250"));
    CHECK(starts(c.cmd("DATA"), "354"));
    const std::string line(998, 'x');
    for (int i = 0; i < 300; ++i) c.send(line + "\r\n");  // 300 KB: one spill
    std::vector<std::string> during;
    for (int i = 0; i < 200 && during.empty(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        during = h.content_files();
    }
    REQUIRE(during.size() == 1);
    CHECK_FALSE(during[0].ends_with(".tmp"));  // no temporary name
    CHECK(c.reply() == "421 4.4.2 mx.test Error: timeout exceeded");
    CHECK(c.closed());
    CHECK(h.content_files().empty());
    CHECK(h.commits().empty());
}

TEST_CASE("hop count limit") {
    Harness h([](smx::Config& c) { c.server.max_hops = 2; });
    Client c(h.port());
    ehlo(c);
    const std::string hdr = "Received: from a\r\nreceived: from b\r\nRECEIVED: from c\r\n";
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, hdr + "\r\nbody\r\n.\r\n"),
                 "554 5.4.6"));
    // Received: lines in the body do not count.
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"},
                              "Subject: x\r\n\r\n" + hdr + ".\r\n"),
                 "250"));
}

TEST_CASE("QMGR answers: tempfail, reject, no answer") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    h.mode = QmgrMode::tempfail;
    CHECK(send_message(c, "a@a.test", {"b@b.test"}, "x\r\n.\r\n") == "451 4.3.2 Queue full");
    h.mode = QmgrMode::reject;
    CHECK(send_message(c, "a@a.test", {"b@b.test"}, "x\r\n.\r\n") == "554 5.3.0 Go away");
    CHECK(h.content_files().empty());  // refused transactions leave no file
    h.mode = QmgrMode::silent;     // the harness waits 2 s for an ack
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "x\r\n.\r\n"), "451 4.3.0"));
    CHECK(h.commits().size() == 3);
}

TEST_CASE("QMGR going away answers 451 and is reported") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    h.mode = QmgrMode::hang_up;
    CHECK(starts(send_message(c, "a@a.test", {"b@b.test"}, "x\r\n.\r\n"), "451 4.3.0"));
    for (int i = 0; i < 100 && !h.qmgr_lost; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
    CHECK(h.qmgr_lost);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250"));
    CHECK(starts(c.cmd("DATA"), "451 4.3.0"));
}

TEST_CASE("connection limits per client and in total") {
    Harness h([](smx::Config& c) {
        c.server.relay_networks.clear();
        c.server.max_connections_per_client = 2;
        c.server.max_connections = 3;
    });
    Client a(h.port()), b(h.port());
    CHECK(starts(a.reply(), "220"));
    CHECK(starts(b.reply(), "220"));
    {
        Client over(h.port());
        CHECK(starts(over.reply(), "421 4.7.0"));
    }
    CHECK(starts(a.cmd("QUIT"), "221"));
    CHECK(a.closed());
    std::string r;
    for (int i = 0; i < 50; ++i) {  // the slot frees once the server saw the close
        Client again(h.port());
        r = again.reply();
        if (starts(r, "220")) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    CHECK(starts(r, "220"));
}

TEST_CASE("trusted clients are exempt from the per-client limit") {
    Harness h([](smx::Config& c) {
        c.server.max_connections_per_client = 1;
        c.server.max_connections = 2;
    });
    Client a(h.port()), b(h.port()), d(h.port());
    CHECK(starts(a.reply(), "220"));
    CHECK(starts(b.reply(), "220"));
    CHECK(starts(d.reply(), "421 4.7.0 mx.test Error: too many connections"));
}

TEST_CASE("routing in the local part is refused from untrusted clients") {
    Harness h([](smx::Config& c) {
        c.server.relay_networks.clear();
        c.server.relay_domains = {"ok.test"};
    });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<u%evil.test@ok.test>"), "554 5.7.1"));
    CHECK(starts(c.cmd("RCPT TO:<evil.test!u@ok.test>"), "554 5.7.1"));
    CHECK(starts(c.cmd("RCPT TO:<\"u@evil.test\"@ok.test>"), "554 5.7.1"));
    CHECK(starts(c.cmd("RCPT TO:<plain@ok.test>"), "250"));
}

TEST_CASE("routing in the local part: trusted clients and allow_untrusted_routing pass") {
    Harness trusted;  // 127.0.0.1 is in the default relay_networks
    Client c(trusted.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<u%evil.test@ok.test>"), "250"));
    Harness allowed([](smx::Config& cfg) {
        cfg.server.relay_networks.clear();
        cfg.server.relay_domains = {"ok.test"};
        cfg.server.allow_untrusted_routing = true;
    });
    Client d(allowed.port());
    ehlo(d);
    CHECK(starts(d.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(d.cmd("RCPT TO:<u%evil.test@ok.test>"), "250"));
}

TEST_CASE("the envelope stays within its encoded size: 452 beyond it") {
    // A limit a config file could not have (check-config refuses it).
    Harness h([](smx::Config& c) { c.server.max_recipients = 100000; });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    // 254-byte addresses (the most valid_address takes), pipelined.
    std::string domain;
    for (int i = 0; i < 3; ++i) domain += std::string(60, 'd') + ".";
    domain += std::string(50, 'e') + ".test";
    const std::size_t n = 16000;
    std::string batch;
    for (std::size_t i = 0; i < n; ++i) {
        const std::string local = std::to_string(100000 + i);
        batch += "RCPT TO:<" + local + std::string(254 - 1 - domain.size() - local.size(), 'u') +
                 "@" + domain + ">\r\n";
    }
    std::thread writer([&] { c.send(batch); });
    std::size_t accepted = 0, refused = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const std::string r = c.reply();
        if (starts(r, "250")) {
            CHECK(refused == 0);
            ++accepted;
        } else {
            CHECK(r == "452 4.5.3 Error: too many recipients (envelope too large)");
            ++refused;
        }
    }
    writer.join();
    CHECK(refused > 0);
    CHECK(accepted * (254 + smx::msg::rcpt_overhead) <= smx::msg::max_envelope);
    CHECK(starts(c.cmd("DATA"), "354"));
    c.send("hi\r\n.\r\n");
    CHECK(starts(c.reply(), "250"));  // what was accepted is committed
    REQUIRE(h.commits().size() == 1);
    CHECK(h.commits()[0].rcpts.size() == accepted);
}

TEST_CASE("no reply is lost while a client pipelines without reading") {
    // NOOPs here test the replies, not server.max_junk_commands.
    Harness h([](smx::Config& c) { c.server.max_junk_commands = 1000000; });
    Client c(h.port());
    ehlo(c);
    // 40,000 NOOPs in writes that each end mid-line, read back concurrently:
    // writing replies out at the cap (rather than when no input waits) must
    // keep every one of them, in order. (The memory bound itself is checked
    // on the real process: tests/integration/test_hostile_client.py.)
    std::string batch;
    for (int i = 0; i < 1000; ++i) batch += "NOOP\r\n";
    std::thread writer([&] {
        for (int i = 0; i < 40; ++i) {
            c.send(batch.substr(0, 3));
            c.send(batch.substr(3));
        }
    });
    int got = 0;
    for (; got < 40000; ++got)
        if (!starts(c.reply(), "250")) break;
    writer.join();
    CHECK(got == 40000);
}

TEST_CASE("DATA must go on at min_data_rate") {
    Harness h([](smx::Config& c) {
        c.server.data_timeout = std::chrono::seconds(2);
        c.server.min_data_rate = 100;
    });
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<a@a.test>"), "250"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250"));
    CHECK(starts(c.cmd("DATA"), "354"));
    // Whole lines, each well within data_timeout, but 3 bytes a second.
    const auto t0 = std::chrono::steady_clock::now();
    std::string r;
    for (int i = 0; i < 10 && r.empty(); ++i) {
        c.send("x\r\n");
        r = c.drain(1000);
    }
    CHECK(starts(r, "421 4.4.2"));
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(6));
    CHECK(h.commits().empty());
}

TEST_CASE("a command line dripped byte by byte ends at command_timeout") {
    Harness h([](smx::Config& c) { c.server.command_timeout = std::chrono::seconds(2); });
    Client c(h.port());
    ehlo(c);
    const auto t0 = std::chrono::steady_clock::now();
    std::string r;
    const std::string cmd = "NOOP NOOP NOOP NOOP NOOP";
    for (std::size_t i = 0; i < cmd.size() && r.empty(); ++i) {
        c.send(cmd.substr(i, 1));
        r = c.drain(500);
    }
    CHECK(r == "421 4.4.2 mx.test Error: timeout exceeded\r\n");
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
}

TEST_CASE("a recipient named twice is stored once, the domain in any case") {
    Harness h([](smx::Config& c) { c.server.max_recipients = 2; });
    Client c(h.port());
    ehlo(c);
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250 2.1.5"));
    CHECK(starts(c.cmd("RCPT TO:<b@B.Test>"), "250 2.1.5"));
    CHECK(starts(c.cmd("RCPT TO:<b@b.test>"), "250 2.1.5"));
    CHECK(starts(c.cmd("RCPT TO:<B@b.test>"), "250 2.1.5"));  // another local part
    CHECK(starts(c.cmd("RCPT TO:<c@b.test>"), "452 4.5.3"));  // duplicates did not count
    REQUIRE(starts(c.cmd("DATA"), "354"));
    REQUIRE(starts(c.cmd("x\r\n."), "250 2.0.0"));
    const auto commits = h.commits();
    REQUIRE(commits.size() == 1);
    REQUIRE(commits[0].rcpts.size() == 2);
    CHECK(commits[0].rcpts[0].addr == "b@b.test");
    CHECK(commits[0].rcpts[1].addr == "B@b.test");
    // The next transaction starts with none seen.
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    CHECK(starts(c.cmd("RCPT TO:<b@B.TEST>"), "250 2.1.5"));
    REQUIRE(starts(c.cmd("DATA"), "354"));
    REQUIRE(starts(c.cmd("x\r\n."), "250 2.0.0"));
    REQUIRE(h.commits().size() == 2);
    REQUIRE(h.commits()[1].rcpts.size() == 1);
    CHECK(h.commits()[1].rcpts[0].addr == "b@B.TEST");
}

TEST_CASE("SMTPUTF8: UTF-8 addresses only with the parameter, and well-formed") {
    Harness h;
    Client c(h.port());
    ehlo(c);
    CHECK(starts(c.cmd("MAIL FROM:<s\xc3\xa9@a.test>"), "553 5.6.7"));
    CHECK(starts(c.cmd("MAIL FROM:<s\xc3@a.test> SMTPUTF8"), "501 5.1.7"));
    CHECK(starts(c.cmd("MAIL FROM:<s\xc0\xaf@a.test> SMTPUTF8"), "501 5.1.7"));  // overlong
    REQUIRE(starts(c.cmd("MAIL FROM:<s\xc3\xa9@\xc3\xa4.test> SMTPUTF8"), "250 "));
    CHECK(starts(c.cmd("RCPT TO:<\xe2\x82\xac@b.test>"), "250 "));
    CHECK(starts(c.cmd("RCPT TO:<x@\xed\xa0\x80.test>"), "501 5.1.3"));  // a surrogate
    REQUIRE(starts(c.cmd("DATA"), "354"));
    REQUIRE(starts(c.cmd("Subject: gr\xc3\xbc\xc3\x9f" "e\r\n\r\nx\r\n."), "250 2.0.0"));
    REQUIRE(starts(c.cmd("MAIL FROM:<a@a.test>"), "250 "));
    CHECK(starts(c.cmd("RCPT TO:<\xe2\x82\xac@b.test>"), "553 5.6.7"));
    const auto commits = h.commits();
    REQUIRE(commits.size() == 1);
    CHECK(commits[0].params == "SMTPUTF8");
    CHECK(commits[0].rcpts.at(0).addr == "\xe2\x82\xac@b.test");
}
