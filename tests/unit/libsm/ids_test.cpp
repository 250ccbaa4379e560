// Queue ids: several processes make them at once, each in its own stream.
#include "ids.hpp"

#include <catch2/catch.hpp>

#include <set>
#include <string>

TEST_CASE("ids carry their process's stream and do not repeat within it") {
    sm::set_id_stream(5);
    std::set<std::string> seen;
    for (int i = 0; i < 5000; ++i) {
        const std::string id = sm::new_ta_id();
        REQUIRE(sm::valid_ta_id(id));
        REQUIRE(std::stoul(id.substr(13), nullptr, 16) >> 11 == 5);
        REQUIRE(seen.insert(id).second);
    }
    sm::set_id_stream(sm::qmgr_id_stream);
    const std::string q = sm::new_ta_id();
    CHECK(std::stoul(q.substr(13), nullptr, 16) >> 11 == 31);
    CHECK(sm::ta_id_time_us(q) <= sm::now_us());
    sm::set_id_stream(0);
}
