// Logging: spdlog, lines in the shape postfix's tools read (pflogsumm,
// fail2ban's postfix filter): "smx/smtpd[pid]: ID: event", the program names
// postfix uses for the same work (docs/operation.md, Logs).
//
// Where a line goes:
// - log.file: "Nov  4 21:00:00 host smx/qmgr[123]: ..." (the file's
//   owner is `smx run`, which hands its children a pipe it copies into the
//   file, and opens the file again on SIGHUP/SIGUSR1: rotation, below);
// - log.syslog: one datagram "<PRI>smx/qmgr[123]: ..." (the daemon adds
//   the time and host);
// - else standard error, as the file; under systemd (JOURNAL_STREAM names
//   our stderr) without time and host, each line prefixed with its
//   priority as sd-daemon(3) reads it ("<4>smx/qmgr[123]: warning: ...").
// Warnings, errors and fatal lines begin with "warning: ", "error: " and
// "fatal: " (smx::panic's with "panic: "), as postfix's do.
#pragma once

#include "libsm/config.hpp"

#include <spdlog/spdlog.h>
#include <string>
#include <string_view>

namespace smx {

// The program names under which postfix's tools expect lines: the process's
// own (init_logging's process: "smtpd", "qmgr", "smtp", "mcp", "pickup"), and
// these for some of their lines.
enum class LogAs {
    cleanup,  // SMTPS: "ID: message-id=<...>" of a message received
    bounce,   // QMGR: "ID: sender non-delivery notification: ID"
};

// The environment variable naming the descriptor `smx run` hands a child
// for its lines when log.file is set (the write end of a pipe).
inline constexpr const char* log_fd_env = "SMX_LOG_FD";
// The longest line written, its newline included; a longer message is cut
// and ends in "...". One line is then one write(2) a pipe keeps whole.
inline constexpr std::size_t max_log_line = 4096;

// Sets the default logger of a process named e.g. "qmgr" ("smx/qmgr", or
// log.syslog_name before the slash).
// With log.file set, lines go to file when it is open (`smx run`: from
// open_log_file), else to the descriptor named by SMX_LOG_FD (a child of
// `smx run`), else to the file opened here (a process started by hand).
void init_logging(const std::string& process, const LogConfig& cfg, int file = -1);

// A logger of this process under another program name (same sink, level).
spdlog::logger& log_as(LogAs who);

// Sets the level of every logger of the process.
void set_log_level(const std::string& level);

// The log file, opened to append: not through a symbolic link, and only a
// regular file with one link. -1 with err.
int open_log_file(const std::string& path, std::string& err);

// `smx run`: the file at the path opened again (logrotate renamed the old
// one), and lines go there from now on. False with err: they go on to the
// file open before.
bool reopen_log_file(const std::string& path, std::string& err);

// `smx run`: whole lines a child wrote (each ends in a newline), written
// out with this process's own, in order.
void write_log_lines(std::string_view lines);

// Writes out every line logged so far, synchronously (a log thread writes them):
// for smx::panic and smx::fatal, just before the process ends. Bounded: it
// gives up after a second rather than hang a dying process.
void drain_log();

} // namespace smx
