// max_connections against the descriptor limit: two descriptors a session,
// a fixed reserve, and each event loop's own.
#include "libsm/limits.hpp"

#include "libsm/listen.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace smx;

TEST_CASE("fitting_connections counts each event loop's descriptors") {
    ServerConfig s;
    s.max_connections = 2000;
    s.threads = 1;
    std::string warning;
    // 64 + 1 loop * (5 + 1 address): (1000 - 70) / 2.
    CHECK(fitting_connections(s, 1000, warning) == 465);
    CHECK(warning.find("needs 4070 file descriptors") != std::string::npos);
    s.threads = 4;
    s.listen.push_back({"127.0.0.2", 25, true});
    // 64 + 4 loops * (5 + 2 addresses): (1000 - 92) / 2.
    CHECK(fitting_connections(s, 1000, warning) == 454);
    CHECK(descriptors_needed(s, 10) == 112);
    CHECK(fitting_connections(s, 4092, warning) == 2000);
    CHECK(warning.empty());
}

TEST_CASE("process_share divides the server-wide limits, rounding up; not the per-client one") {
    ServerConfig s;
    s.max_connections = 1000;
    s.max_connections_per_client = 50;
    s.max_transactions = 0;  // no limit stays no limit
    const ServerConfig one = process_share(s, 3);
    CHECK(one.max_connections == 334);
    // QMGR's anvil counts it for all processes together.
    CHECK(one.max_connections_per_client == 50);
    CHECK(one.max_transactions == 0);
    CHECK(process_share(s, 1).max_connections == 1000);
}

TEST_CASE("smtps_layout: processes = 0 runs the fewest whose shares fit the descriptor limit") {
    ServerConfig s;
    s.threads = 1;
    s.max_connections = 1000;
    std::string warning;
    // Each of p processes needs 2 * (ceil(1000 / p) and a tenth) + 64 + 6:
    // p = 4 needs 620, p = 5 needs 510.
    SmtpsLayout l = smtps_layout(s, 600, warning);
    CHECK(l.processes == 5);
    CHECK(l.loops == 1);
    CHECK(warning.empty());
    l = smtps_layout(s, 2070, warning);
    CHECK(l.processes == 1);
    // Set, it is what is asked, and a share that does not fit is a warning.
    s.processes = 2;
    l = smtps_layout(s, 600, warning);
    CHECK(l.processes == 2);
    CHECK(warning.find("each of 2 smx-smtps processes: server.max_connections = 500") == 0);
    // More than max_smtps_processes would need: that many, warned.
    s.processes = 0;
    s.max_connections = 1000000;
    l = smtps_layout(s, 600, warning);
    CHECK(l.processes == max_smtps_processes);
    CHECK(warning.find("using max_connections = 265") != std::string::npos);
}

TEST_CASE("smtps_layout: threads = 0 shares the CPUs out among the processes") {
    ServerConfig s;
    s.processes = 2;
    std::string warning;
    const SmtpsLayout l = smtps_layout(s, 100000, warning);
    CHECK(l.loops == std::max(1u, event_loops(0) / s.processes));
    s.processes = 1;
    CHECK(smtps_layout(s, 100000, warning).loops == event_loops(0));
}

TEST_CASE("sessions_fitting: what one process's descriptors hold") {
    ServerConfig s;
    s.threads = 1;
    CHECK(sessions_fitting(s, 600) == 265);  // (600 - 64 - 6) / 2
    CHECK(sessions_fitting(s, 10) == 1);
}
