#include "libsm/policy_tables.hpp"

namespace smx {
namespace {

table::TableList open_key(const char* key, const std::vector<std::string>& specs) {
    try {
        return table::TableList::open(specs);
    } catch (const table::TableError& e) {
        throw ConfigError(key, e.what());
    }
}

} // namespace

PolicyTables::PolicyTables(const PolicyConfig& cfg)
    : client_access(open_key("policy.client_access", cfg.client_access)),
      helo_access(open_key("policy.helo_access", cfg.helo_access)),
      sender_access(open_key("policy.sender_access", cfg.sender_access)),
      recipient_access(open_key("policy.recipient_access", cfg.recipient_access)),
      relay_recipient_maps(open_key("policy.relay_recipient_maps", cfg.relay_recipient_maps)),
      header_checks(open_key("policy.header_checks", cfg.header_checks)),
      body_checks(open_key("policy.body_checks", cfg.body_checks)) {}

} // namespace smx
