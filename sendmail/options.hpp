// The sendmail command line, as scripts and programs use it (postfix's
// sendmail(1) and sendmail 8's): pure parsing, no I/O, so that it is
// unit-tested on its own. Options may come before, between or after the
// recipients, as glibc's getopt permutes them; "--" ends them. Letters of
// sendmail 8 that smx has nothing to do for (-oem, -odi, -B 8BITMIME, ...)
// are taken with their argument and ignored; an unknown letter is ignored
// with a warning, as postfix does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::sendmail {

enum class Mode {
    deliver,  // -bm (the default): read a message, queue it
    smtp,     // -bs: an SMTP session on standard input and output
    queue,    // -bp, or run as mailq: smx queue
    flush,    // -q: smx flush
    aliases,  // -bi, -I, or run as newaliases: there is no alias table yet
};

struct Options {
    Mode mode = Mode::deliver;
    bool extract = false;      // -t: recipients from To:, Cc:, Bcc:
    bool ignore_dots = false;  // -i, -oi: a lone dot does not end the message
    bool verbose = false;      // -v
    std::optional<std::string> sender;    // -f, -r: the envelope sender as given
    std::optional<std::string> fullname;  // -F
    std::optional<std::string> config;    // -C FILE (postfix: a directory; either works)
    std::vector<std::string> rcpts;       // as given
    std::vector<std::string> warnings;    // one line each, for standard error
};

// argv[0]'s last path component selects mailq and newaliases. nullopt
// with err on a usage error (an option without its argument, a -b mode
// smx does not offer).
std::optional<Options> parse(const std::vector<std::string>& argv, std::string& err);

} // namespace smx::sendmail
