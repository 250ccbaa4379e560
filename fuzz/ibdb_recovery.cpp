// IBDB recovery of a crafted log file: the input is written as the only log
// file of a fresh directory and replayed as QMGR does at start-up.
// Oracle: every recovered transaction has per-recipient flags that fit it.
#include "qmgr/ibdb_record.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    spdlog::set_level(spdlog::level::off);  // recovery logs every bad record
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const fs::path root = fs::temp_directory_path() /
                                 ("smx-fuzz-ibdb-" + std::to_string(::getpid()));
    fs::remove_all(root);
    fs::create_directories(root / "ibdb");
    fs::create_directories(root / "quarantine");
    std::ofstream(root / "ibdb" / smx::qmgr::ibdb::file_name(1), std::ios::binary)
        .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    smx::qmgr::IbdbOptions opt;
    opt.dir = (root / "ibdb").string();
    opt.quarantine_dir = (root / "quarantine").string();
    const auto log = smx::qmgr::ibdb::read_log(opt);
    for (const auto& [file, ta] : log.tas) {
        const std::size_t n = ta.envelope.rcpts.size();
        if (file != 1 || ta.rcpt_done.size() != n || ta.rcpt_deferred.size() != n) std::abort();
    }
    return 0;
}
