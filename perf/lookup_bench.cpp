// smx-lookup-bench: the CPU one lookup costs in a hash: (or btree:) table,
// outside the relay, warm (each key looked up once before the timed rounds).
//
//   smx-lookup-bench [-n ENTRIES] [-t hash|btree] [-r ROUNDS] [-d DIR]
//
// Writes a table of ENTRIES (default 1,000,000) keys "userNNNNNNN@example.com"
// into DIR (default: a new directory in /tmp, removed at the end), builds it
// with smx::table::build as `smx map build` does, opens it as smx does
// (smx::table::open, the table that follows its file) and times ROUNDS
// (default 3) passes of lookups in a random order: 100,000 keys in the
// table, 100,000 that are not. Prints the build's time and, per lookup, the
// process CPU time (CLOCK_PROCESS_CPUTIME_ID) of the best round: the least
// disturbed by other load.
#include "libsm/lookup_table.hpp"
#include "libsm/table_build.hpp"

#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <vector>

namespace {

double cpu_seconds() {
    timespec ts{};
    ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) / 1e9;
}

std::string key(std::size_t i, bool present) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s%07zu@example.com", present ? "user" : "nobody", i);
    return buf;
}

// The best of rounds, in ns per lookup; every key must answer as expected.
double time_lookups(const smx::table::Table& t, const std::vector<std::string>& keys, bool present,
                    int rounds) {
    double best = 1e30;
    for (int r = 0; r <= rounds; ++r) {  // round 0 warms the cache
        const double start = cpu_seconds();
        for (const auto& k : keys)
            if (t.find(k).found() != present) {
                std::cerr << "smx-lookup-bench: wrong answer for " << k << "\n";
                std::exit(1);
            }
        const double ns = (cpu_seconds() - start) * 1e9 / double(keys.size());
        if (r > 0) best = std::min(best, ns);
    }
    return best;
}

} // namespace

int main(int argc, char** argv) {
    std::size_t entries = 1000000;
    int rounds = 3;
    std::string type = "hash";
    std::string dir;
    for (int opt; (opt = ::getopt(argc, argv, "n:r:t:d:")) != -1;) {
        switch (opt) {
        case 'n': entries = std::stoul(optarg); break;
        case 'r': rounds = std::stoi(optarg); break;
        case 't': type = optarg; break;
        case 'd': dir = optarg; break;
        default:
            std::cerr << "usage: smx-lookup-bench [-n ENTRIES] [-t hash|btree] [-r ROUNDS] [-d DIR]\n";
            return 64;
        }
    }
    if (entries == 0 || rounds < 1 || (type != "hash" && type != "btree")) {
        std::cerr << "smx-lookup-bench: -n and -r must be > 0, -t hash or btree\n";
        return 64;
    }
    const bool own_dir = dir.empty();
    if (own_dir) {
        char tmpl[] = "/tmp/smx-lookup-bench-XXXXXX";
        if (!::mkdtemp(tmpl)) {
            std::perror("mkdtemp");
            return 1;
        }
        dir = tmpl;
    }
    const std::string source = std::filesystem::absolute(dir).string() + "/table";
    {
        std::ofstream f(source);
        for (std::size_t i = 0; i < entries; ++i) f << key(i, true) << " OK\n";
        if (!f.flush()) {
            std::cerr << "smx-lookup-bench: cannot write " << source << "\n";
            return 1;
        }
    }
    const double build_start = cpu_seconds();
    const auto built = smx::table::build(
        source, type == "hash" ? smx::table::DbKind::hash : smx::table::DbKind::btree,
        smx::table::Syntax::table, [](const std::string& w) { std::cerr << w << "\n"; });
    const double build_cpu = cpu_seconds() - build_start;
    const auto table = smx::table::open(type + ":" + source);

    std::mt19937_64 rng(42);
    const std::size_t n = std::min<std::size_t>(entries, 100000);
    std::vector<std::string> found, missing;
    for (std::size_t i = 0; i < n; ++i) {
        found.push_back(key(rng() % entries, true));
        missing.push_back(key(rng() % entries, false));
    }
    const double found_ns = time_lookups(*table, found, true, rounds);
    const double missing_ns = time_lookups(*table, missing, false, rounds);
    std::cout << "table " << type << ": " << built.entries << " entries, built in " << build_cpu
              << " s CPU\n"
              << "lookup, found:     " << found_ns << " ns CPU\n"
              << "lookup, not found: " << missing_ns << " ns CPU\n";
    if (own_dir) std::filesystem::remove_all(dir);
    return 0;
}
