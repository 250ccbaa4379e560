// The lookup tables of [policy] (docs/policy.md), opened: SMTPS opens them
// with each config it runs (at start and at every reload, so that a table
// rebuilt since is read), smx run and check-config once to refuse a config
// whose tables cannot be opened.
#pragma once

#include "libsm/config.hpp"
#include "libsm/lookup_table.hpp"

namespace smx {

struct PolicyTables {
    // Opens every table of cfg; throws ConfigError naming the key and the
    // table ("policy.sender_access: hash:/etc/smx/x: cannot open ...").
    explicit PolicyTables(const PolicyConfig& cfg);

    table::TableList client_access, helo_access, sender_access, recipient_access,
        relay_recipient_maps, header_checks, body_checks;
};

} // namespace smx
