// The link between the MCP and a child, both ends in one process: secrets
// one way (the newest wins), start reports the other.
#include "mcp/child_link.hpp"

#include "libsm/mcp_link.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

using namespace smx::mcp;

namespace {

// The child's end as a child finds it: SMX_MCP_FD names it.
smx::McpLink child_of(ChildLink& link) {
    const int fd = ::dup(link.child_end());
    REQUIRE(fd >= 3);
    link.child_started();
    ::setenv("SMX_MCP_FD", std::to_string(fd).c_str(), 1);
    smx::McpLink child = smx::McpLink::from_env();
    ::unsetenv("SMX_MCP_FD");
    return child;
}

smx::Secrets with_key(const std::string& key) {
    smx::Secrets s;
    s.set(smx::Secret::tls_key, key);
    return s;
}

} // namespace

TEST_CASE("link: the child takes the newest secrets, and keeps them until new ones come") {
    ChildLink link;
    std::string err;
    REQUIRE(link.open(err));
    REQUIRE(link.send(with_key("first"), err));
    REQUIRE(link.send(with_key("second"), err));
    smx::McpLink child = child_of(link);
    REQUIRE(child.take_secrets().at(smx::Secret::tls_key) == "second");
    REQUIRE(child.take_secrets().at(smx::Secret::tls_key) == "second");
    REQUIRE(link.send(with_key("third"), err));
    REQUIRE(child.take_secrets().at(smx::Secret::tls_key) == "third");
    // Not started by smx run: no secrets, and reports go nowhere.
    smx::McpLink alone = smx::McpLink::from_env();
    REQUIRE_FALSE(alone.take_secrets().has(smx::Secret::tls_key));
    alone.ready();
}

TEST_CASE("link: the child's reports, a reason made one printable line") {
    ChildLink link;
    std::string err;
    REQUIRE(link.open(err));
    smx::McpLink child = child_of(link);
    link.read_reports();
    REQUIRE_FALSE(link.ready());
    child.cannot_start("config /etc/smx/smx.toml: denied\n\x1b[2Jforged line");
    link.read_reports();
    REQUIRE_FALSE(link.ready());
    REQUIRE(link.cannot_start() == "config /etc/smx/smx.toml: denied??[2Jforged line");
    child.cannot_start(std::string(5000, 'x'));
    child.ready();
    link.read_reports();
    REQUIRE(link.ready());
    REQUIRE(link.cannot_start().size() == smx::max_link_message - smx::link_cannot_start.size());
}

TEST_CASE("link: the child refuses secrets that are not a sealed memfd from smx run") {
    for (const bool sealed : {false, true}) {
        int pair[2];  // [0] stands for the MCP, which would never send these
        REQUIRE(::socketpair(AF_UNIX, SOCK_SEQPACKET, 0, pair) == 0);
        ::setenv("SMX_MCP_FD", std::to_string(pair[1]).c_str(), 1);
        smx::McpLink child = smx::McpLink::from_env();
        ::unsetenv("SMX_MCP_FD");
        const int memfd = ::memfd_create("test", MFD_ALLOW_SEALING);
        const std::string bundle = with_key("k").encode();
        REQUIRE(::write(memfd, bundle.data(), bundle.size()) ==
                static_cast<ssize_t>(bundle.size()));
        if (sealed)
            REQUIRE(::fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK) == 0);
        REQUIRE(send_with_fd(pair[0], smx::link_secrets, memfd) > 0);
        ::close(memfd);
        if (sealed) {
            REQUIRE(child.take_secrets().at(smx::Secret::tls_key) == "k");
            REQUIRE(::send(pair[0], smx::link_secrets.data(), smx::link_secrets.size(), 0) > 0);
            REQUIRE_THROWS_WITH(child.take_secrets(),
                                "a message from smx run without its secrets memfd");
        } else {
            REQUIRE_THROWS_WITH(child.take_secrets(),
                                "the secrets from smx run are not in a sealed memfd");
        }
        ::close(pair[0]);
    }
    ::setenv("SMX_MCP_FD", "0", 1);
    REQUIRE_THROWS_WITH(smx::McpLink::from_env(),
                        "SMX_MCP_FD=0 is not the link to smx run (a SOCK_SEQPACKET socket)");
    ::unsetenv("SMX_MCP_FD");
}
