// smx: `smx run` (the MCP) and the operator commands.
#include "mcp/cli.hpp"
#include "mcp/cli_config.hpp"
#include "mcp/map_command.hpp"
#include "mcp/queue_commands.hpp"
#include "mcp/reload.hpp"
#include "mcp/run.hpp"

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <iostream>

int main(int argc, char** argv) {
    std::string err;
    auto args = smx::mcp::parse_args(argc, argv, err);
    if (!args) {
        std::cerr << "smx: " << err << " (smx --help lists the commands)\n";
        return smx::mcp::exit_usage;
    }
    if (args->command == "help") {
        if (args->operands.empty()) smx::mcp::print_usage(std::cout);
        else smx::mcp::print_help(std::cout, args->operands.front());
        return smx::mcp::exit_ok;
    }
    if (args->command == "version") {
        std::cout << "smx " SMX_VERSION "\n";
        return smx::mcp::exit_ok;
    }
    if (args->command == "map") {
        // A table that changes under `smx map query` logs to stderr, not
        // into the answer.
        auto lg = spdlog::stderr_logger_st("smx");
        lg->set_pattern("smx map: %v");
        spdlog::set_default_logger(lg);
        return smx::mcp::map_command(args->operands, std::cin, std::cout, std::cerr);
    }
    smx::mcp::resolve_config(*args);
    if (args->command == "run") return smx::mcp::run(*args);
    if (args->command == "check-config")
        return smx::mcp::check_config(args->config_path, std::cout, std::cerr, args->config_source);
    if (args->command == "config") return smx::mcp::config_command(*args, std::cout, std::cerr);
    if (args->command == "reload") return smx::mcp::reload_command(*args, std::cout, std::cerr);

    // libsm's channel logs its warnings; for a command they belong on
    // stderr, never in the output a script parses.
    auto lg = spdlog::stderr_logger_st("smx");
    lg->set_pattern("smx: %v");
    lg->set_level(spdlog::level::warn);
    spdlog::set_default_logger(lg);
    return smx::mcp::ctl_command(*args, std::cin, std::cout, std::cerr);
}
