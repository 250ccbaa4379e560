// The sendmail command line as cron, PHP's mail(), logwatch and friends
// write it (sendmail/options.hpp).
#include "sendmail/options.hpp"

#include <catch2/catch.hpp>

using namespace smx::sendmail;

namespace {

Options ok(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "/usr/sbin/sendmail");
    std::string err;
    auto o = parse(argv, err);
    INFO(err);
    REQUIRE(o);
    return *o;
}

std::string usage_error(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "sendmail");
    std::string err;
    REQUIRE_FALSE(parse(argv, err));
    return err;
}

} // namespace

TEST_CASE("the common invocations", "[sendmail]") {
    // cron (Debian): sendmail -FCronDaemon -i -B8BITMIME -oem root
    Options cron = ok({"-FCronDaemon", "-i", "-B8BITMIME", "-oem", "root"});
    CHECK(cron.mode == Mode::deliver);
    CHECK(cron.fullname == "CronDaemon");
    CHECK(cron.ignore_dots);
    CHECK(cron.rcpts == std::vector<std::string>{"root"});
    CHECK(cron.warnings.empty());
    // PHP's mail(): sendmail -t -i, and -f with a separate word.
    Options php = ok({"-t", "-i", "-f", "www@example.org"});
    CHECK(php.extract);
    CHECK(php.ignore_dots);
    CHECK(php.sender == "www@example.org");
    CHECK(php.rcpts.empty());
    // Bundled letters and -oi.
    Options bundled = ok({"-oi", "-ti", "-v", "--", "-dash@example.org"});
    CHECK(bundled.ignore_dots);
    CHECK(bundled.extract);
    CHECK(bundled.verbose);
    CHECK(bundled.rcpts == std::vector<std::string>{"-dash@example.org"});
    // -r is -f; attached arguments; options after recipients (getopt permutes).
    Options r = ok({"a@example.org", "-rbounce@example.org", "-CFILE", "b@example.org", "-odi"});
    CHECK(r.sender == "bounce@example.org");
    CHECK(r.config == "FILE");
    CHECK(r.rcpts == std::vector<std::string>{"a@example.org", "b@example.org"});
    CHECK(ok({"-f", "<>", "x@y.z"}).sender == "<>");
    CHECK(ok({"-f", "", "x@y.z"}).sender == "");
}

TEST_CASE("modes: -bm -bs -bp -bi -I -q, and the names mailq and newaliases", "[sendmail]") {
    CHECK(ok({"-bm", "x@y.z"}).mode == Mode::deliver);
    CHECK(ok({"-bs"}).mode == Mode::smtp);
    CHECK(ok({"-bp"}).mode == Mode::queue);
    CHECK(ok({"-b", "p"}).mode == Mode::queue);
    CHECK(ok({"-bi"}).mode == Mode::aliases);
    CHECK(ok({"-I"}).mode == Mode::aliases);
    CHECK(ok({"-q"}).mode == Mode::flush);
    CHECK(ok({"-q30m"}).mode == Mode::flush);
    CHECK(ok({"-qRexample.org"}).mode == Mode::flush);
    std::string err;
    CHECK(parse({"/usr/bin/mailq"}, err)->mode == Mode::queue);
    CHECK(parse({"newaliases"}, err)->mode == Mode::aliases);
    CHECK(usage_error({"-bd"}) == "-bd is not supported (smx offers -bm, -bs, -bp, -bi; the daemon is `smx run`)");
    CHECK(usage_error({"-bv", "x@y.z"}).starts_with("-bv is not supported"));
}

TEST_CASE("unknown letters are ignored with a warning, known ones silently", "[sendmail]") {
    const Options o = ok({"-Z", "-odb", "-oQ/var/spool", "-N", "never", "-R", "hdrs", "-V", "envid",
                          "-46Ucmnx", "-h", "5", "-e", "q", "-L", "label", "-pESMTP", "-X", "/tmp/log",
                          "-Oname=value", "-G", "x@y.z"});
    CHECK(o.warnings == std::vector<std::string>{"-Z option ignored"});
    CHECK(o.rcpts == std::vector<std::string>{"x@y.z"});
    CHECK_FALSE(o.ignore_dots);
    CHECK(ok({"-Y", "-W", "x@y.z"}).warnings.size() == 2);
}

TEST_CASE("an option without its argument is a usage error", "[sendmail]") {
    CHECK(usage_error({"-f"}) == "option -f needs an argument");
    CHECK(usage_error({"x@y.z", "-F"}) == "option -F needs an argument");
    CHECK(usage_error({"-C"}) == "option -C needs an argument");
}
