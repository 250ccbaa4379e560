// open_checked: what another account may put under a content file's name is
// refused by what it is (a link, a FIFO, a socket, a directory, a hard link,
// another owner, another size), without blocking and without reading.
#include "libsm/content_trust.hpp"

#include "libsm/ids.hpp"

#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using namespace smx::content;

namespace {

struct Dir {
    fs::path p = fs::temp_directory_path() / ("smx-trust-" + smx::new_ta_id());
    Dir() { fs::create_directories(p); }
    ~Dir() { fs::remove_all(p); }
};

int check(const fs::path& path, const Expect& e, std::string& why) {
    int fd = -1;
    std::uint64_t size = 0;
    const int err = open_checked(path.string(), e, fd, size, why);
    if (fd >= 0) ::close(fd);
    return err;
}

} // namespace

TEST_CASE("content trust: a file of the right writer and size opens; anything else is refused") {
    Dir d;
    const uid_t me = ::geteuid();
    const Expect seven{me, me, 7, true};
    std::ofstream(d.p / "ok") << "message";
    std::string why;
    int fd = -1;
    std::uint64_t size = 0;
    REQUIRE(open_checked((d.p / "ok").string(), seven, fd, size, why) == 0);
    CHECK(size == 7);
    CHECK(fd >= 0);
    ::close(fd);

    CHECK(check(d.p / "none", seven, why) == ENOENT);

    fs::create_symlink(d.p / "ok", d.p / "link");
    CHECK(check(d.p / "link", seven, why) == ELOOP);
    CHECK(why == "a symbolic link");

    // A FIFO with no writer: refused at once, not waited on.
    REQUIRE(::mkfifo((d.p / "fifo").c_str(), 0600) == 0);
    CHECK(check(d.p / "fifo", seven, why) == EBADMSG);
    CHECK(why == "a FIFO");

    fs::create_directories(d.p / "dir");
    CHECK(check(d.p / "dir", seven, why) == EBADMSG);
    CHECK(why == "a directory");

    const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un sa{};
    sa.sun_family = AF_UNIX;
    const std::string sock = (d.p / "sock").string();
    std::strncpy(sa.sun_path, sock.c_str(), sizeof sa.sun_path - 1);
    REQUIRE(::bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
    CHECK(check(d.p / "sock", seven, why) == EBADMSG);
    CHECK(why == "a socket");
    ::close(s);

    fs::create_hard_link(d.p / "ok", d.p / "hard");
    CHECK(check(d.p / "hard", seven, why) == EBADMSG);
    CHECK(why == "2 hard links");
    fs::remove(d.p / "hard");

    // Another writer: the file is ours here, so expect someone else.
    CHECK(check(d.p / "ok", Expect{me + 1, me + 2, 7, true}, why) == EBADMSG);
    CHECK(why.find("owned by uid") == 0);
    CHECK(check(d.p / "ok", Expect{me + 1, me, 7, true}, why) == 0);  // the second writer

    // The size: exact, or at most.
    CHECK(check(d.p / "ok", Expect{me, me, 8, true}, why) == EBADMSG);
    CHECK(why == "7 bytes, 8 expected");
    CHECK(check(d.p / "ok", Expect{me, me, 8, false}, why) == 0);
    CHECK(check(d.p / "ok", Expect{me, me, 6, false}, why) == EBADMSG);
    CHECK(why == "7 bytes, at most 6 expected");

    // A huge sparse file is refused by its size alone: nothing is read.
    {
        const int big = ::open((d.p / "sparse").c_str(), O_WRONLY | O_CREAT, 0600);
        REQUIRE(big >= 0);
        REQUIRE(::ftruncate(big, off_t(1) << 40) == 0);
        ::close(big);
    }
    CHECK(check(d.p / "sparse", Expect{me, me, 1 << 20, false}, why) == EBADMSG);
}

TEST_CASE("content trust: the writers the MCP names, or this process alone") {
    ::unsetenv(writers_env);
    const uid_t me = ::geteuid();
    CHECK(writers_from_env().smtps == me);
    CHECK(writers_from_env().qmgr == me);
    ::setenv(writers_env, writers_env_value({101, 102}).c_str(), 1);
    CHECK(writers_from_env().smtps == 101);
    CHECK(writers_from_env().qmgr == 102);
    // Anything malformed trusts nobody but this process.
    for (const char* bad : {"", "101", "101:", ":102", "a:b", "101:102:103", "-1:2", "99999999999999:1"}) {
        ::setenv(writers_env, bad, 1);
        CHECK(writers_from_env().smtps == me);
        CHECK(writers_from_env().qmgr == me);
    }
    ::unsetenv(writers_env);
    const Expect e = message_file({1, 2}, 10);
    CHECK(e.owner == 1);
    CHECK(e.other_owner == 2);
    CHECK(e.max_size == 10);
    CHECK(e.exact);
}
