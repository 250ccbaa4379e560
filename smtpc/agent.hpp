// The QMGR side of SMTPC: reads DELIVER records and answers each with a
// RESULT when its delivery finishes. Deliveries run concurrently; QMGR
// decides how many per destination.
#pragma once

#include "smtpc/delivery.hpp"

#include "libsm/channel.hpp"

#include <memory>

namespace smx::smtpc {

// Returns when QMGR closes the channel or sends something that is not a
// valid DELIVER (a protocol error: the channel is dropped).
asio::awaitable<void> serve_qmgr(std::shared_ptr<smx::Channel> ch, Deliverer& del);

} // namespace smx::smtpc
