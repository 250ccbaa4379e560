#include "libsm/child_start.hpp"

#include <iostream>

namespace smx {

std::optional<ChildStart> start_child(std::string_view program, int argc, char** argv) {
    ChildStart s;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "-c" && i + 1 < argc) {
            s.config_path = argv[++i];
        } else {
            std::cerr << "usage: " << program << " [-c FILE]\n";
            return std::nullopt;
        }
    }
    try {
        s.mcp = McpLink::from_env();
    } catch (const std::exception& e) {
        std::cerr << program << ": " << e.what() << "\n";
        return std::nullopt;
    }
    try {
        s.config = load_config(s.config_path);
    } catch (const std::exception& e) {
        const std::string why = "config " +
                                (s.config_path.empty() ? "(defaults)" : s.config_path) + ": " +
                                e.what();
        std::cerr << program << ": " << why << "\n";
        s.mcp.cannot_start(why);
        return std::nullopt;
    }
    return s;
}

} // namespace smx
