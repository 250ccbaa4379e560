// sendmail: the command cron, logwatch, unattended-upgrades, monitoring and
// PHP's mail() run, as postfix's sendmail(1); installed as
// /usr/sbin/sendmail, and as mailq and newaliases (links to it). It is not
// privileged: it reads the message, makes it what local mail should be
// (sendmail/message.hpp) and hands it to smx-postdrop, which writes it into
// the maildrop, whether or not the relay runs. `mailq` (-bp) and -q are
// `smx queue` and `smx flush`; newaliases (-bi) builds the alias tables of
// rewrite.alias_maps. Exit status: sysexits.h, with a line on standard error.
#include "sendmail/message.hpp"
#include "sendmail/options.hpp"
#include "sendmail/smtp_session.hpp"

#include "libsm/address.hpp"
#include "libsm/config.hpp"
#include "libsm/ids.hpp"
#include "libsm/lookup_table.hpp"
#include "libsm/maildrop_file.hpp"
#include "libsm/table_build.hpp"

#include <fcntl.h>
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <set>

namespace {

namespace fs = std::filesystem;

struct Failure : std::runtime_error {
    Failure(int status, const std::string& what) : std::runtime_error(what), status(status) {}
    int status;
};

// Next to this program (a copied set), in the build tree in its own folder,
// else where meson installed it.
std::string find_program(const std::string& name, const std::string& folder,
                         const std::string& installed) {
    std::error_code ec;
    const fs::path self = fs::read_symlink("/proc/self/exe", ec).parent_path();
    for (const fs::path& p : {self / name, (self / ".." / folder / name).lexically_normal(),
                              fs::path(installed) / name})
        if (::access(p.c_str(), X_OK) == 0) return p.string();
    throw Failure(EX_UNAVAILABLE, "cannot find " + name + " (looked next to " + self.string() +
                                      " and in " + installed + ")");
}

// -C FILE, or a directory holding smx.toml (postfix's -C names one); else
// the installed file when it exists; else the built-in defaults ("").
std::string config_path(const smx::sendmail::Options& o) {
    if (o.config) {
        std::error_code ec;
        return fs::is_directory(*o.config, ec) ? *o.config + "/smx.toml" : *o.config;
    }
    return ::access(SMX_DEFAULT_CONFIG, F_OK) == 0 ? SMX_DEFAULT_CONFIG : "";
}

// Who runs us: the login (the default sender's local part, postfix's
// myorigin being server.hostname), and the full name From: carries.
smx::sendmail::Local whoami(const smx::Config& cfg, const smx::sendmail::Options& o) {
    smx::sendmail::Local l;
    const passwd* pw = ::getpwuid(::getuid());
    const std::string login = pw ? pw->pw_name : std::to_string(::getuid());
    l.login_address = login + "@" + cfg.server.hostname;
    if (o.fullname) l.fullname = *o.fullname;
    else if (const char* name = std::getenv("NAME"); name && *name) l.fullname = name;
    else if (pw && pw->pw_gecos) l.fullname = std::string(pw->pw_gecos).substr(0, std::strcspn(pw->pw_gecos, ","));
    l.hostname = cfg.server.hostname;
    return l;
}

// An address as given (with or without <>), qualified with server.hostname
// when it has no domain (postfix's myorigin); nullopt when it is not valid.
// The sender may be empty or "<>": the null sender.
std::optional<std::string> qualify(const smx::Config& cfg, std::string_view a, bool sender) {
    if (a.size() >= 2 && a.front() == '<' && a.back() == '>') a = a.substr(1, a.size() - 2);
    std::string out(a);
    if (!out.empty() && out.find('@') == std::string::npos) out += "@" + cfg.server.hostname;
    for (char c : out)
        if (static_cast<unsigned char>(c) >= 0x80) return std::nullopt;
    if (!smx::valid_address(out, sender)) return std::nullopt;
    return out;
}

void write_all(int fd, std::string_view s) {
    while (!s.empty()) {
        const ssize_t n = ::write(fd, s.data(), s.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // smx-postdrop stopped reading: its status says why
        s.remove_prefix(static_cast<std::size_t>(n));
    }
}

std::string read_all(int fd) {
    std::string out;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) break;
        out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
}

// Runs smx-postdrop with the submission on its standard input.
smx::sendmail::Queued postdrop(const std::string& program, const std::string& cfg_path,
                          const std::string& sender, const std::vector<std::string>& rcpts,
                          const std::string& content) {
    smx::maildrop::Envelope e;
    e.sender = sender;
    e.rcpts = rcpts;
    e.content_size = content.size();
    int in[2], out[2], err[2];
    if (::pipe2(in, O_CLOEXEC) != 0 || ::pipe2(out, O_CLOEXEC) != 0 ||
        ::pipe2(err, O_CLOEXEC) != 0)
        throw Failure(EX_OSERR, std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid < 0) throw Failure(EX_OSERR, std::string("fork: ") + std::strerror(errno));
    if (pid == 0) {
        ::dup2(in[0], 0);
        ::dup2(out[1], 1);
        ::dup2(err[1], 2);
        const char* argv[] = {"smx-postdrop", "-c", cfg_path.c_str(), nullptr};
        ::execv(program.c_str(), const_cast<char* const*>(argv));
        const std::string why = "cannot run " + program + ": " + std::strerror(errno) + "\n";
        write_all(2, why);
        ::_exit(EX_UNAVAILABLE);
    }
    ::close(in[0]);
    ::close(out[1]);
    ::close(err[1]);
    write_all(in[1], smx::maildrop::encode(e, smx::maildrop::Kind::submission));
    write_all(in[1], content);
    ::close(in[1]);
    smx::sendmail::Queued q;
    q.name = read_all(out[0]);
    q.error = read_all(err[0]);
    ::close(out[0]);
    ::close(err[0]);
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    q.status = WIFEXITED(status) ? WEXITSTATUS(status) : EX_SOFTWARE;
    while (!q.name.empty() && q.name.back() == '\n') q.name.pop_back();
    while (!q.error.empty() && q.error.back() == '\n') q.error.pop_back();
    if (q.error.starts_with("smx-postdrop: ")) q.error.erase(0, 14);
    if (q.status == EX_OK && !smx::maildrop::valid_name(q.name))
        q = {EX_SOFTWARE, {}, "smx-postdrop said it queued \"" + q.name + "\""};
    return q;
}

[[noreturn]] void exec_smx(const std::string& command, const std::string& cfg_path) {
    const std::string smx = find_program("smx", "mcp", SMX_SBINDIR);
    const char* argv[] = {"smx", command.c_str(), "-c", cfg_path.c_str(), nullptr};
    ::execv(smx.c_str(), const_cast<char* const*>(argv));
    throw Failure(EX_UNAVAILABLE, "cannot run " + smx + ": " + std::strerror(errno));
}

// The recipients of the command line and (-t) of the headers, qualified,
// each once.
std::vector<std::string> recipients(const smx::Config& cfg, const smx::sendmail::Options& o,
                                    const std::vector<std::string>& from_headers) {
    std::vector<std::string> out;
    std::set<std::string> keys;
    auto add = [&](const std::string& a, const char* where) {
        const auto q = qualify(cfg, a, false);
        if (!q) throw Failure(EX_DATAERR, "invalid recipient address <" + a + "> " + where);
        if (keys.insert(smx::address_key(*q)).second) out.push_back(*q);
    };
    for (const auto& arg : o.rcpts)
        for (const auto& a : smx::sendmail::address_list(arg)) add(a, "on the command line");
    for (const auto& a : from_headers) add(a, "in the headers (-t)");
    if (out.empty()) throw Failure(EX_USAGE, "no recipients specified");
    if (out.size() > cfg.server.max_recipients)
        throw Failure(EX_DATAERR, std::to_string(out.size()) +
                                      " recipients exceed server.max_recipients (" +
                                      std::to_string(cfg.server.max_recipients) + ")");
    return out;
}

int deliver(const smx::Config& cfg, const std::string& cfg_path, const smx::sendmail::Options& o) {
    std::string sender;
    if (o.sender) {
        const auto s = qualify(cfg, *o.sender, true);
        if (!s) throw Failure(EX_DATAERR, "invalid sender address <" + *o.sender + ">");
        sender = *s;
    }
    smx::sendmail::Local local = whoami(cfg, o);
    if (!o.sender) sender = local.login_address;
    smx::sendmail::Collector c(cfg.server.max_message_size);
    char buf[65536];
    for (;;) {
        const ssize_t n = ::read(0, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) throw Failure(EX_IOERR, std::string("reading the message: ") + std::strerror(errno));
        if (n == 0 || c.bytes({buf, static_cast<std::size_t>(n)}, o.ignore_dots)) break;
    }
    c.end_of_input();
    local.sender = sender;
    local.now_us = smx::now_us();
    local.random = smx::maildrop::random_part();
    const smx::sendmail::Prepared p = smx::sendmail::prepare(c.lines(), local, o.extract);
    const std::uint64_t size = c.too_big() ? c.size() : p.content.size();
    if (size > cfg.server.max_message_size)
        throw Failure(EX_DATAERR, "message of " + std::to_string(size) +
                                      " bytes exceeds server.max_message_size (" +
                                      std::to_string(cfg.server.max_message_size) +
                                      "): message file too big");
    const auto rcpts = recipients(cfg, o, p.header_rcpts);
    const auto q = postdrop(find_program("smx-postdrop", "postdrop", SMX_LIBEXECDIR), cfg_path,
                            sender, rcpts, p.content);
    if (q.status != EX_OK) throw Failure(q.status, q.error);
    if (o.verbose)
        std::cerr << "sendmail: from=<" << sender << ">, nrcpt=" << rcpts.size()
                  << ": queued as " << q.name << " in " << cfg.maildrop_dir_abs()
                  << " (smx-pickup takes it while smx runs)\n";
    return EX_OK;
}

int smtp(const smx::Config& cfg, const std::string& cfg_path, const smx::sendmail::Options& o) {
    const std::string program = find_program("smx-postdrop", "postdrop", SMX_LIBEXECDIR);
    smx::sendmail::Qualify q = [&](std::string_view a, bool sender) { return qualify(cfg, a, sender); };
    smx::sendmail::Submit submit = [&](const std::string& sender, const std::vector<std::string>& rcpts,
                                  const std::string& content) {
        return postdrop(program, cfg_path, sender, rcpts, content);
    };
    return smx::sendmail::smtp_session(0, 1, cfg, whoami(cfg, o), q, submit);
}

// newaliases (-bi): each hash: or btree: table of rewrite.alias_maps built
// from its aliases(5) text, as postalias does for postfix's alias_database.
int newaliases(const std::string& cfg_path) {
    smx::Config cfg;
    try {
        cfg = smx::load_config(cfg_path);
    } catch (const std::exception& e) {
        throw Failure(EX_CONFIG, "config " + (cfg_path.empty() ? "(defaults)" : cfg_path) + ": " +
                                     e.what());
    }
    bool built = false;
    for (const auto& spec : cfg.rewrite.alias_maps) {
        const auto b = smx::table::buildable(spec);
        if (!b) continue;  // read as they are: nothing to build
        try {
            const auto r = smx::table::build(
                b->source, b->kind, smx::table::Syntax::aliases,
                [](const std::string& w) { std::cerr << "newaliases: warning: " << w << "\n"; });
            std::cerr << "newaliases: " << b->source << ".db: " << r.entries << " alias"
                      << (r.entries == 1 ? "" : "es") << "\n";
        } catch (const smx::table::TextError& e) {
            throw Failure(EX_DATAERR, e.what());
        } catch (const smx::table::TableError& e) {
            throw Failure(EX_CANTCREAT, e.what());
        }
        built = true;
    }
    if (!built)
        std::cerr << "newaliases: no alias table to rebuild (rewrite.alias_maps names no hash: "
                     "or btree: table)\n";
    return EX_OK;
}

} // namespace

int main(int argc, char** argv) {
    // smx-postdrop may stop reading early; its exit status says why.
    std::signal(SIGPIPE, SIG_IGN);
    const std::vector<std::string> args(argv, argv + argc);
    std::string err;
    const auto o = smx::sendmail::parse(args, err);
    if (!o) {
        std::cerr << "sendmail: " << err << "\n";
        return EX_USAGE;
    }
    for (const auto& w : o->warnings) std::cerr << "sendmail: warning: " << w << "\n";
    try {
        const std::string cfg_path = config_path(*o);
        if (o->mode == smx::sendmail::Mode::aliases) return newaliases(cfg_path);
        if (o->mode == smx::sendmail::Mode::queue) exec_smx("queue", cfg_path);
        if (o->mode == smx::sendmail::Mode::flush) exec_smx("flush", cfg_path);
        smx::Config cfg;
        try {
            cfg = smx::load_config(cfg_path);
        } catch (const std::exception& e) {
            throw Failure(EX_CONFIG, "config " + (cfg_path.empty() ? "(defaults)" : cfg_path) +
                                         ": " + e.what());
        }
        if (o->mode == smx::sendmail::Mode::smtp) return smtp(cfg, cfg_path, *o);
        return deliver(cfg, cfg_path, *o);
    } catch (const Failure& e) {
        std::cerr << "sendmail: " << e.what() << "\n";
        return e.status;
    } catch (const std::exception& e) {
        // The system failed us (getrandom, memory): said, not swallowed.
        std::cerr << "sendmail: " << e.what() << "\n";
        return EX_OSERR;
    }
}
