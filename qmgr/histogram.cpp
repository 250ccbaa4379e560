#include "qmgr/histogram.hpp"

#include <fmt/format.h>

namespace smx::qmgr {

std::uint64_t Histogram::count() const {
    std::uint64_t n = 0;
    for (auto c : counts_) n += c;
    return n;
}

void Histogram::expose(std::string& out, std::string_view name, std::string_view help) const {
    out += fmt::format("# HELP {} {}\n# TYPE {} histogram\n", name, help, name);
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < counts_.size(); ++i) {
        n += counts_[i];
        if (i < bounds_.size()) out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, bounds_[i], n);
        else out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, n);
    }
    out += fmt::format("{}_sum {}\n{}_count {}\n", name, sum_, name, n);
}

} // namespace smx::qmgr
