#include "sendmail/options.hpp"

namespace smx::sendmail {
namespace {

// Letters that take an argument, attached ("-fuser") or as the next word.
// Of sendmail 8 and postfix: -B body type, -C config, -F full name, -L
// syslog label, -N DSN notify, -O option, -R DSN return, -V envid, -X
// traffic log, -b mode, -e error mode, -f sender, -h hop count, -o option,
// -p protocol, -r sender.
constexpr std::string_view with_argument = "BCFLNORVXbefhopr";
// Taken and ignored without a word: IPv4/v6 only, submission/relay, old
// flags smx has nothing to do for.
constexpr std::string_view ignored_flags = "46GUcmnx";

bool mode(std::string_view arg, Options& o, std::string& err) {
    if (arg == "m") o.mode = Mode::deliver;
    else if (arg == "s") o.mode = Mode::smtp;
    else if (arg == "p") o.mode = Mode::queue;
    else if (arg == "i") o.mode = Mode::aliases;
    else {
        err = "-b" + std::string(arg) + " is not supported (smx offers -bm, -bs, -bp, -bi" +
              (arg == "d" ? "; the daemon is `smx run`)" : ")");
        return false;
    }
    return true;
}

// One letter and its argument, if it takes one.
bool option(char c, const std::string& arg, Options& o, std::string& err) {
    switch (c) {
    case 'b': return mode(arg, o, err);
    case 'C': o.config = arg; break;
    case 'F': o.fullname = arg; break;
    case 'f':
    case 'r': o.sender = arg; break;
    case 'o':
        // -oi is -i; -oem, -odb, -oQ... are sendmail 8 options smx has no use for.
        if (arg == "i") o.ignore_dots = true;
        break;
    case 'i': o.ignore_dots = true; break;
    case 't': o.extract = true; break;
    case 'v': o.verbose = true; break;
    case 'I': o.mode = Mode::aliases; break;
    case 'q':
        // -q, -q1h, -qR site, -qS site: smx flushes the whole queue.
        o.mode = Mode::flush;
        break;
    default:
        if (with_argument.find(c) == std::string_view::npos &&
            ignored_flags.find(c) == std::string_view::npos)
            o.warnings.push_back(std::string("-") + c + " option ignored");
    }
    return true;
}

} // namespace

std::optional<Options> parse(const std::vector<std::string>& argv, std::string& err) {
    Options o;
    if (!argv.empty()) {
        const std::string& a0 = argv[0];
        const std::string name = a0.substr(a0.rfind('/') == std::string::npos ? 0 : a0.rfind('/') + 1);
        if (name == "mailq") o.mode = Mode::queue;
        else if (name == "newaliases") o.mode = Mode::aliases;
    }
    bool options_done = false;
    for (std::size_t i = 1; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (options_done || a.size() < 2 || a[0] != '-') {
            o.rcpts.push_back(a);
            continue;
        }
        if (a == "--") {
            options_done = true;
            continue;
        }
        for (std::size_t k = 1; k < a.size(); ++k) {
            const char c = a[k];
            std::string arg;
            if (c == 'q') {
                // Its argument (an interval, R site...) only attached.
                arg = a.substr(k + 1);
                k = a.size();
            } else if (with_argument.find(c) != std::string_view::npos) {
                if (k + 1 < a.size()) {
                    arg = a.substr(k + 1);
                } else if (i + 1 < argv.size()) {
                    arg = argv[++i];
                } else {
                    err = std::string("option -") + c + " needs an argument";
                    return std::nullopt;
                }
                k = a.size();
            }
            if (!option(c, arg, o, err)) return std::nullopt;
        }
    }
    return o;
}

} // namespace smx::sendmail
