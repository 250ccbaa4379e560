// max_connections against the descriptor limit: two descriptors a session,
// a fixed reserve, and each event loop's own.
#include "limits.hpp"

#include <catch2/catch.hpp>

using namespace sm;

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
