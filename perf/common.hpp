// Helpers shared by smx-source and smx-sink: option parsing, sizes,
// JSON output and run-time limits. Kept tiny on purpose: the tools must be
// easy to audit because every benchmark figure passes through them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace smx::perf {

// Walks argv; value() fails with a usage error when an option lacks one.
class Args {
public:
    Args(int argc, char** argv) : argv_(argv + 1, argv + argc) {}
    bool next();                       // advances to the next option
    const std::string& opt() const { return cur_; }
    std::string value();               // the option's argument
    long number(long min, long max);   // value() as a bounded integer
    double real(double min, double max);

private:
    std::vector<std::string> argv_;
    std::size_t i_ = 0;
    std::string cur_;
};

// "1024", "4K", "32k", "1M" -> bytes.
std::size_t parse_size(std::string_view s);

// Wall-clock seconds since the epoch: the harness compares these with its
// own clock to time a run end to end across processes.
double epoch_seconds();

// Raises RLIMIT_NOFILE to the hard limit: thousands of sessions need it.
void raise_fd_limit();

std::string json_escape(std::string_view s);
std::string fixed(double v, int decimals = 3);
// {"a":1,"b":2} from a counter map.
std::string json_counts(const std::map<std::string, std::uint64_t>& m);

// FNV-1a: stable across runs and builds, so failure shares are reproducible.
std::uint64_t fnv1a(std::string_view s);

} // namespace smx::perf
