// Histograms in Prometheus's text format, and the cut of per-label gauges.
#include "qmgr/histogram.hpp"

#include <catch2/catch.hpp>

using smx::qmgr::Histogram;

TEST_CASE("histogram: cumulative buckets, +Inf, sum and count") {
    Histogram h({0.125, 1, 10});
    for (double v : {0.0625, 0.125, 0.5, 3.0, 50.0}) h.observe(v);
    CHECK(h.count() == 5);
    std::string out;
    h.expose(out, "smx_x_seconds", "What it is");
    CHECK(out == "# HELP smx_x_seconds What it is\n"
                 "# TYPE smx_x_seconds histogram\n"
                 "smx_x_seconds_bucket{le=\"0.125\"} 2\n"  // le: at most the bound
                 "smx_x_seconds_bucket{le=\"1\"} 3\n"
                 "smx_x_seconds_bucket{le=\"10\"} 4\n"
                 "smx_x_seconds_bucket{le=\"+Inf\"} 5\n"
                 "smx_x_seconds_sum 53.6875\n"
                 "smx_x_seconds_count 5\n");
}

TEST_CASE("histogram: empty") {
    Histogram h({1});
    std::string out;
    h.expose(out, "e", "h");
    CHECK(out == "# HELP e h\n# TYPE e histogram\ne_bucket{le=\"1\"} 0\ne_bucket{le=\"+Inf\"} 0\n"
                 "e_sum 0\ne_count 0\n");
}

TEST_CASE("per-label gauges keep the largest, largest first") {
    smx::qmgr::LabelCounts v;
    for (int i = 0; i < 100; ++i) v.emplace_back("d" + std::to_string(i), i % 50);
    smx::qmgr::keep_largest(v, smx::qmgr::max_label_series);
    REQUIRE(v.size() == 20);
    CHECK(v[0] == std::pair<std::string, std::uint64_t>{"d49", 49});
    CHECK(v[1] == std::pair<std::string, std::uint64_t>{"d99", 49});
    CHECK(v[19].second == 40);
    smx::qmgr::LabelCounts few{{"a", 1}, {"b", 3}};
    smx::qmgr::keep_largest(few, 20);
    CHECK(few == smx::qmgr::LabelCounts{{"b", 3}, {"a", 1}});
    CHECK(smx::qmgr::seconds_since(2'000'000, 1'000'000) == 0);
    CHECK(smx::qmgr::seconds_since(1'000'000, 3'500'000) == 2.5);
}
