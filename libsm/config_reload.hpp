// Reload (`smx reload`, SIGHUP; docs/operation.md): what each process does
// when the MCP tells it to re-read the configuration file.
//
// Each process keeps its running config in a std::shared_ptr<const Config>
// and, on SIGHUP, loads and validates the file again. A file that does not
// load is logged and changes nothing. Otherwise the keys a running smx
// cannot change keep their running values, the log level is set, and the
// process hands the new config to its owners through a named operation
// (smx::smtps::Server::reload, Qmgr::reload, smx::smtpc::Deliverer::reload). Sessions
// and deliveries under way finish with the config they started with.
#pragma once

#include "libsm/config.hpp"

#include <boost/asio/io_context.hpp>
#include <boost/asio/signal_set.hpp>
#include <csignal>

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace smx {

// The keys that keep their running values until a restart (the rows of
// smx::config_keys() with Reload::restart): listen addresses, accounts, the
// [queue] settings QMGR's parts took at start, log sinks, ... Gives next the
// running value of each such key that differs, and returns their names.
std::vector<std::string> keep_restart_only(const Config& running, Config& next);

// The reload signal (SIGHUP) as a set: the MCP starts its children with it
// blocked, so that one sent during a child's start-up waits, and
// ConfigReloader unblocks it once its handler is set.
sigset_t reload_signals();

// Sets the level of the process's logger (log.level).
void set_log_level(const LogConfig& cfg);

// Waits for SIGHUP on io, then reloads the config file at path as described
// above; apply gets the new config (restart-only keys already kept) and
// throws to refuse it (e.g. a certificate that does not load), which keeps
// the running one. Logs "config reloaded" or why not.
class ConfigReloader {
public:
    using Apply = std::function<void(Config next)>;
    ConfigReloader(boost::asio::io_context& io, std::string path, const Config& running,
                   Apply apply);
    ConfigReloader(const ConfigReloader&) = delete;
    ConfigReloader& operator=(const ConfigReloader&) = delete;
    void stop();

private:
    void wait();
    void reload();

    boost::asio::signal_set hup_;
    std::string path_;
    Config running_;
    Apply apply_;
};

} // namespace smx
