// Lookup tables for tests of what reads them: "fail:" names a table whose
// every lookup fails, as a broken hash: file's would; any other spec is
// opened as smx::table::open opens it.
#pragma once

#include "libsm/lookup_table.hpp"

#include <memory>
#include <string>
#include <vector>

namespace smx::test {

class FailingTable final : public smx::table::Table {
public:
    FailingTable() : Table("fail:") {}
    smx::table::Lookup find(std::string_view) const override {
        return {smx::table::Status::failed, {}};
    }
};

inline smx::table::TableList open_tables(const std::vector<std::string>& specs) {
    std::vector<std::shared_ptr<const smx::table::Table>> t;
    for (const auto& s : specs)
        t.push_back(s == "fail:" ? std::make_shared<FailingTable>() : smx::table::open(s));
    return smx::table::TableList(std::move(t));
}

} // namespace smx::test
