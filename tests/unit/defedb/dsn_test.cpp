// The RFC 3464 DSN builder: structure, fields, line rules.
#include "libsm/ids.hpp"
#include "qmgr/dsn.hpp"

#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <vector>

namespace dsn = smx::qmgr::dsn;

namespace {

std::vector<std::string> split_lines(const std::string& msg) {
    std::vector<std::string> lines;
    std::size_t pos = 0;
    while (pos < msg.size()) {
        std::size_t e = msg.find("\r\n", pos);
        REQUIRE(e != std::string::npos);  // the message ends with CRLF
        lines.push_back(msg.substr(pos, e - pos));
        pos = e + 2;
    }
    return lines;
}

// Header-style block (message header, part header, or a group of the
// delivery-status part): unfolded fields by lower-case name.
std::multimap<std::string, std::string> fields(const std::vector<std::string>& block) {
    std::multimap<std::string, std::string> out;
    std::string name, value;
    auto flush = [&] {
        if (!name.empty()) out.emplace(name, value);
        name.clear();
    };
    for (const auto& l : block) {
        if (!l.empty() && (l[0] == ' ' || l[0] == '\t')) {
            value += l;
            continue;
        }
        flush();
        auto colon = l.find(':');
        REQUIRE(colon != std::string::npos);
        name = l.substr(0, colon);
        for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        value = l.substr(colon + 2);
    }
    flush();
    return out;
}

// Blocks separated by empty lines.
std::vector<std::vector<std::string>> blocks(const std::vector<std::string>& lines) {
    std::vector<std::vector<std::string>> out(1);
    for (const auto& l : lines) {
        if (l.empty()) {
            if (!out.back().empty()) out.emplace_back();
        } else {
            out.back().push_back(l);
        }
    }
    if (out.back().empty()) out.pop_back();
    return out;
}

smx::msg::TaCommit original() {
    smx::msg::TaCommit ta;
    ta.ta_id = "6740A1B2C3D4E0001";
    ta.sender = "alice@example.org";
    ta.params = "SIZE=1000 ENVID=abc+2Bdef";
    ta.rcpts = {{"bob@example.net", "ORCPT=rfc822;Bob+2BX@example.net"}, {"carol@example.net", ""}};
    ta.arrival_us = 1'763'830'000'000'000;
    return ta;
}

const std::string headers =
    "Received: from client.example ([127.0.0.1])\r\n\tby mx.test with ESMTP id 6740A1B2C3D4E0001\r\n"
    "From: Alice <alice@example.org>\r\nTo: bob@example.net\r\nSubject: hello\r\n";

} // namespace

TEST_CASE("dsn: bounce structure and fields") {
    auto ta = original();
    dsn::FailedRcpt bob{"bob@example.net", ta.rcpts[0].params, {550, "5.1.1", "user unknown"},
                        "mx.example.net[192.0.2.7]:25", dsn::Action::failed, 1'763'830'100'000'000};
    std::string long_text(3000, 'x');
    for (std::size_t i = 50; i < long_text.size(); i += 60) long_text[i] = ' ';
    long_text += std::string(1500, 'y') + "\r\nInjected: header";
    dsn::FailedRcpt carol{"carol@example.net", "", {554, "", long_text}, "", dsn::Action::failed, 0};
    dsn::Report rep{"mx.test", "6740A1B2C3D4E0009", 1'763'830'200'000'000, headers + "\r\nbody\r\n", ""};
    std::string msg = dsn::build(ta, {bob, carol}, rep);

    // CRLF everywhere, no line over 998.
    for (std::size_t i = 0; i < msg.size(); ++i) {
        if (msg[i] == '\n') REQUIRE((i > 0 && msg[i - 1] == '\r'));
        if (msg[i] == '\r') REQUIRE((i + 1 < msg.size() && msg[i + 1] == '\n'));
    }
    auto lines = split_lines(msg);
    for (const auto& l : lines) CHECK(l.size() <= 998);

    auto head_end = std::find(lines.begin(), lines.end(), "");
    auto head = fields({lines.begin(), head_end});
    CHECK(head.find("from")->second == "Mail Delivery System <MAILER-DAEMON@mx.test>");
    CHECK(head.find("to")->second == "<alice@example.org>");
    CHECK(head.find("subject")->second == "Undelivered Mail Returned to Sender");
    CHECK(head.find("date")->second == "Sat, 22 Nov 2025 16:50:00 +0000");
    CHECK(head.find("message-id")->second == "<6740A1B2C3D4E0009@mx.test>");
    CHECK(head.find("mime-version")->second == "1.0");
    CHECK(head.find("auto-submitted")->second == "auto-replied");
    std::string ct = head.find("content-type")->second;
    CHECK(ct.rfind("multipart/report; report-type=delivery-status;", 0) == 0);
    auto bpos = ct.find("boundary=\"");
    REQUIRE(bpos != std::string::npos);
    std::string boundary = ct.substr(bpos + 10, ct.find('"', bpos + 10) - bpos - 10);
    REQUIRE(!boundary.empty());

    // Three parts between the boundary lines, then the closing delimiter.
    std::vector<std::vector<std::string>> parts;
    bool closed = false;
    for (auto it = head_end; it != lines.end(); ++it) {
        if (*it == "--" + boundary) {
            parts.emplace_back();
        } else if (*it == "--" + boundary + "--") {
            closed = true;
            CHECK(it + 1 == lines.end());
        } else if (!parts.empty()) {
            parts.back().push_back(*it);
        }
    }
    CHECK(closed);
    REQUIRE(parts.size() == 3);
    auto part_blocks = [&](int i) { return blocks(parts[static_cast<std::size_t>(i)]); };
    CHECK(fields(part_blocks(0)[0]).find("content-type")->second == "text/plain; charset=us-ascii");
    CHECK(fields(part_blocks(1)[0]).find("content-type")->second == "message/delivery-status");
    CHECK(fields(part_blocks(2)[0]).find("content-type")->second == "text/rfc822-headers");

    std::string human;
    for (const auto& l : parts[0]) human += l + "\n";
    CHECK(human.find("This is the mail system at host mx.test.") != std::string::npos);
    CHECK(human.find("<bob@example.net>: host mx.example.net said: 550 5.1.1 user unknown") != std::string::npos);

    auto status = part_blocks(1);
    REQUIRE(status.size() == 4);  // part header, per-message fields, two recipients
    auto msgf = fields(status[1]);
    CHECK(msgf.find("reporting-mta")->second == "dns; mx.test");
    CHECK(msgf.find("original-envelope-id")->second == "abc+def");
    CHECK(msgf.find("arrival-date")->second == smx::rfc5322_date(ta.arrival_us));
    auto b = fields(status[2]);
    CHECK(b.find("final-recipient")->second == "rfc822; bob@example.net");
    CHECK(b.find("original-recipient")->second == "rfc822; Bob+X@example.net");
    CHECK(b.find("action")->second == "failed");
    CHECK(b.find("status")->second == "5.1.1");
    CHECK(b.find("remote-mta")->second == "dns; mx.example.net");
    CHECK(b.find("diagnostic-code")->second == "smtp; 550 5.1.1 user unknown");
    CHECK(b.find("last-attempt-date")->second == smx::rfc5322_date(bob.last_attempt_us));
    auto c = fields(status[3]);
    CHECK(c.find("final-recipient")->second == "rfc822; carol@example.net");
    CHECK(c.count("original-recipient") == 0);
    CHECK(c.count("remote-mta") == 0);
    CHECK(c.find("status")->second == "5.0.0");
    CHECK(c.count("injected") == 0);  // the CRLF in the reply text did not end the field
    std::string diag = c.find("diagnostic-code")->second;
    // No remote MTA: the 554 was not a server's, so no "smtp" diagnostic.
    CHECK(diag.rfind("X-smx; xxx", 0) == 0);
    CHECK(diag.find("Injected: header") != std::string::npos);

    // The original header section, without the body.
    std::string returned;
    auto body = std::find(parts[2].begin(), parts[2].end(), "");
    for (auto it = body; it != parts[2].end(); ++it)
        if (!it->empty()) returned += *it + "\r\n";
    CHECK(returned == headers);
}

TEST_CASE("dsn: delay warning and the null sender") {
    auto ta = original();
    CHECK(dsn::should_bounce(ta));
    ta.sender.clear();
    CHECK_FALSE(dsn::should_bounce(ta));

    ta.sender = "alice@example.org";
    // A connection failure: SMTPC's own 451, no server replied, so no Remote-MTA
    // and no "smtp" diagnostic.
    dsn::FailedRcpt r{"bob@example.net", "", {451, "4.4.1", "connect to [127.0.0.1]:2600: Connection refused"},
                      "", dsn::Action::delayed, 0};
    std::string msg = dsn::build(ta, {r}, {"mx.test", "6740A1B2C3D4E000A", 1'763'830'200'000'000, headers, ""});
    CHECK(msg.find("\r\nSubject: Delayed Mail (still being retried)\r\n") != std::string::npos);
    CHECK(msg.find("\r\nAction: delayed\r\n") != std::string::npos);
    CHECK(msg.find("\r\nStatus: 4.4.1\r\n") != std::string::npos);
    CHECK(msg.find("\r\nDiagnostic-Code: X-smx; connect to [127.0.0.1]:2600: Connection refused\r\n") !=
          std::string::npos);
    CHECK(msg.find("Remote-MTA") == std::string::npos);
}

TEST_CASE("dsn: header section of a content file") {
    auto dir = std::filesystem::temp_directory_path() / ("dsn-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    // A content file (id) of data, opened.
    std::vector<std::unique_ptr<smx::content::Body>> bodies;
    auto write = [&](const std::string& id, const std::string& data) -> const smx::content::Body& {
        std::ofstream(dir / id, std::ios::binary) << data;
        bodies.push_back(std::make_unique<smx::content::Body>());
        const smx::content::Store store{dir.string(), false, {::geteuid(), ::geteuid()}};
        REQUIRE(bodies.back()->open(store, id, id, data.size()) == 0);
        return *bodies.back();
    };
    std::string err;
    CHECK(dsn::read_header_section(write("0000000000000000A", headers + "\r\nbody\r\n\r\nmore\r\n"), err) == headers);
    CHECK(dsn::read_header_section(write("0000000000000000B", headers), err) == headers);  // no body at all
    CHECK(dsn::read_header_section(write("0000000000000000C", "\r\nbody only\r\n"), err) == "");
    // No empty line within the cap: whole lines only.
    std::string huge;
    for (int i = 0; huge.size() < 100'000; ++i) huge += "X-Filler-" + std::to_string(i) + ": some value\r\n";
    auto h = dsn::read_header_section(write("0000000000000000D", huge), err, 1000);
    REQUIRE(h);
    CHECK(h->size() <= 1000);
    CHECK(h->ends_with("\r\n"));
    CHECK(huge.rfind(*h, 0) == 0);
    std::filesystem::remove_all(dir);
}

TEST_CASE("dsn: a failed recipient keeps the reply as SMTPC gave it") {
    const auto a = dsn::failed_rcpt("x@example.org", {550, "5.1.1", "no such user here"}, "mx[192.0.2.1]:25");
    CHECK(a.reply == smx::msg::Reply{550, "5.1.1", "no such user here"});
    CHECK(a.remote_mta == "mx[192.0.2.1]:25");
    // The end of the queue lifetime keeps the last reply's code and server.
    const auto e = dsn::expired_rcpt("x@example.org", {451, "4.3.0", "try later"}, "mx", 7);
    CHECK(e.reply == smx::msg::Reply{451, "4.4.7", "message expired in queue: try later"});
    CHECK(e.remote_mta == "mx");
    CHECK(e.last_attempt_us == 7);
}

TEST_CASE("dsn: an Action: relayed notice (NOTIFY=SUCCESS, next hop without DSN)") {
    auto ta = original();
    dsn::FailedRcpt r{"bob@example.net", ta.rcpts[0].params, {250, "2.0.0", "Ok: queued as 1"},
                      "nodsn.example.net[192.0.2.9]:25", dsn::Action::relayed, 0};
    const std::string msg = dsn::build(ta, {r}, {"mx.test", "6740A1B2C3D4E000B", 1'763'830'200'000'000,
                                                 headers, "ignored: success notices carry headers only"});
    CHECK(msg.find("\r\nSubject: Successful Mail Delivery Report\r\n") != std::string::npos);
    CHECK(msg.find("\r\nAction: relayed\r\n") != std::string::npos);
    CHECK(msg.find("\r\nStatus: 2.0.0\r\n") != std::string::npos);
    CHECK(msg.find("\r\nRemote-MTA: dns; nodsn.example.net\r\n") != std::string::npos);
    CHECK(msg.find("\r\nOriginal-Envelope-Id: abc+def\r\n") != std::string::npos);
    CHECK(msg.find("\r\nOriginal-Recipient: rfc822; Bob+X@example.net\r\n") != std::string::npos);
    CHECK(msg.find("Content-Type: text/rfc822-headers") != std::string::npos);
    CHECK(msg.find("ignored") == std::string::npos);
}

TEST_CASE("dsn: RET=FULL returns the whole message in a failure report") {
    auto ta = original();
    dsn::FailedRcpt r{"bob@example.net", "", {550, "5.1.1", "user unknown"}, "mx[192.0.2.7]:25",
                      dsn::Action::failed, 0};
    const std::string whole = headers + "\r\nthe body\nbare LF line\r\n";
    const std::string msg = dsn::build(ta, {r}, {"mx.test", "6740A1B2C3D4E000C", 1'763'830'200'000'000,
                                                 headers, whole});
    CHECK(msg.find("Content-Type: message/rfc822\r\n") != std::string::npos);
    CHECK(msg.find("text/rfc822-headers") == std::string::npos);
    CHECK(msg.find("\r\nSubject: hello\r\n\r\nthe body\r\nbare LF line\r\n") != std::string::npos);
    // Delay warnings never carry the body (RFC 3461 4.3).
    r.action = dsn::Action::delayed;
    const std::string warn = dsn::build(ta, {r}, {"mx.test", "6740A1B2C3D4E000D", 1'763'830'200'000'000,
                                                  headers, whole});
    CHECK(warn.find("the body") == std::string::npos);
    CHECK(warn.find("Content-Type: text/rfc822-headers") != std::string::npos);
}

TEST_CASE("dsn: read_message returns a message up to its cap, nothing larger") {
    auto dir = std::filesystem::temp_directory_path() / ("dsn-msg-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "0000000000000000E", std::ios::binary) << std::string(1000, 'x');
    smx::content::Body body;
    const smx::content::Store store{dir.string(), false, {::geteuid(), ::geteuid()}};
    REQUIRE(body.open(store, "0000000000000000E", "0000000000000000E", 1000) == 0);
    std::string err;
    CHECK(dsn::read_message(body, err, 1000) == std::string(1000, 'x'));
    CHECK_FALSE(dsn::read_message(body, err, 999));
    CHECK(err.find("larger than 999") != std::string::npos);
    std::filesystem::remove_all(dir);
}
