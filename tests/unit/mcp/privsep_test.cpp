// Started as root, smx run lays out the spool for the children's accounts:
// the directories it makes are passable whatever the umask, and one it did
// not make that an account cannot pass (or a config file it cannot read)
// stops the start, named.
#include "mcp/privsep.hpp"

#include <catch2/catch.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

using namespace smx::mcp;
namespace fs = std::filesystem;

namespace {

mode_t mode_of(const fs::path& p) {
    struct stat st;
    REQUIRE(::stat(p.c_str(), &st) == 0);
    return st.st_mode & 07777;
}

} // namespace

TEST_CASE("privsep: the parents smx makes are 0755; one an account cannot pass is named") {
    if (::geteuid() != 0) {
        WARN("not root: smx run gives the spool to accounts only as root");
        return;
    }
    char tmpl[] = "/tmp/smx-privsep-XXXXXX";
    REQUIRE(::mkdtemp(tmpl));  // 0700 root:root, as a home directory
    const fs::path top = tmpl;
    smx::Config cfg;
    cfg.queue.spool_dir = (top / "var" / "spool").string();
    cfg.queue.run_dir = (top / "var" / "run").string();
    const RunAs nobody{"nobody", 65534, 65534, {65534}};
    Accounts a{nobody, nobody, nobody, 65534, 65534};

    const mode_t old_umask = ::umask(027);  // smx run's
    std::string err;
    const bool made = make_dirs(cfg, &a, err);
    ::umask(old_umask);
    REQUIRE(made);
    CHECK(mode_of(top / "var") == 0755);
    CHECK(mode_of(top / "var" / "spool") == 0751);  // others pass to the maildrop

    CHECK_FALSE(check_reach(cfg, "", a, err));
    CHECK(err == "nobody (smx-smtps) cannot pass through " + top.string() + " (0700 root:root) "
                 "on its way to " + top.string() + "/var/spool/cdb; let it (chmod o+x " +
                 top.string() + ") or use a directory it can reach");
    ::chmod(top.c_str(), 0755);
    err.clear();
    CHECK(check_reach(cfg, "", a, err));
    CHECK(err.empty());

    const fs::path config = top / "smx.toml";
    std::ofstream(config) << "\n";
    ::chmod(config.c_str(), 0600);
    CHECK_FALSE(check_reach(cfg, config.string(), a, err));
    CHECK(err == "nobody (smx-smtps) cannot read the config file " + config.string() +
                 " (0600 root:root); make it readable to it, e.g. chgrp smx and chmod g+r");
    ::chmod(config.c_str(), 0644);
    CHECK(check_reach(cfg, config.string(), a, err));

    fs::remove_all(top);
}
