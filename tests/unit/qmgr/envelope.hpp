// A TA_COMMIT envelope for the unit tests of QMGR's parts: a fresh id, its
// own content id, one recipient per address.
#pragma once

#include "libsm/ids.hpp"
#include "libsm/messages.hpp"

#include <string>
#include <vector>

inline smx::msg::TaCommit envelope(std::vector<std::string> rcpts) {
    smx::msg::TaCommit e;
    e.ta_id = smx::new_ta_id();
    e.content_id = e.ta_id;
    e.sender = "a@example.org";
    e.size = 100;
    e.arrival_us = smx::now_us();
    for (auto& r : rcpts) e.rcpts.push_back({r, ""});
    return e;
}
