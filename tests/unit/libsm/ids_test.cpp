// Queue ids: several processes make them at once, each in its own stream.
#include "libsm/ids.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

TEST_CASE("ids carry their process's stream and do not repeat within it") {
    smx::set_id_stream(5);
    std::set<std::string> seen;
    for (int i = 0; i < 5000; ++i) {
        const std::string id = smx::new_ta_id();
        REQUIRE(smx::valid_ta_id(id));
        REQUIRE(std::stoul(id.substr(13), nullptr, 16) >> 11 == 5);
        REQUIRE(seen.insert(id).second);
    }
    smx::set_id_stream(smx::qmgr_id_stream);
    const std::string q = smx::new_ta_id();
    CHECK(std::stoul(q.substr(13), nullptr, 16) >> 11 == 31);
    CHECK(smx::ta_id_time_us(q) <= smx::now_us());
    smx::set_id_stream(0);
}
