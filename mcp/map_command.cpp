#include "mcp/map_command.hpp"

#include "mcp/cli.hpp"

#include "libsm/lookup_table.hpp"
#include "libsm/table_build.hpp"

#include <filesystem>
#include <optional>

namespace smx::mcp {
namespace {
namespace fs = std::filesystem;

struct MapArgs {
    std::string action;  // build, query, dump
    std::string type;    // -t; empty: hash, or the operand's own "type:"
    bool aliases = false;
    std::vector<std::string> operands;
};

std::optional<MapArgs> parse(const std::vector<std::string>& ops, std::string& err) {
    MapArgs a;
    if (ops.empty()) {
        err = "map needs build, query or dump";
        return std::nullopt;
    }
    a.action = ops[0];
    if (a.action != "build" && a.action != "query" && a.action != "dump") {
        err = "map: '" + a.action + "' is not build, query or dump";
        return std::nullopt;
    }
    for (std::size_t i = 1; i < ops.size(); ++i) {
        const std::string& o = ops[i];
        if (o == "-t") {
            if (++i == ops.size()) {
                err = "map: -t needs a type (hash or btree)";
                return std::nullopt;
            }
            a.type = ops[i];
        } else if (o == "-a") {
            a.aliases = true;
        } else if (o.size() > 1 && o[0] == '-') {
            err = "map: unknown option '" + o + "'";
            return std::nullopt;
        } else {
            a.operands.push_back(o);
        }
    }
    const std::size_t n = a.operands.size();
    if (a.action == "build" ? n == 0 : a.action == "query" ? n != 2 : n != 1) {
        err = "map " + a.action + " takes " +
              (a.action == "build" ? "FILE..." : a.action == "query" ? "FILE KEY|-" : "FILE");
        return std::nullopt;
    }
    if (a.aliases && a.action != "build") {
        err = "map: -a goes with build only (query and dump read any table)";
        return std::nullopt;
    }
    const bool known = a.type == "hash" || a.type == "btree" ||
                       (a.action != "build" && (a.type == "texthash" || a.type == "pcre" || a.type == "regexp"));
    if (!a.type.empty() && !known) {
        err = "map: -t takes hash or btree" +
              std::string(a.action == "build" ? "" : " (or texthash, pcre, regexp)") + ", not '" + a.type + "'";
        return std::nullopt;
    }
    return a;
}

// "hash:/abs/FILE" for an operand FILE or TYPE:FILE (postmap's way of
// naming one); inline:{...} as it is.
std::string spec_of(const std::string& operand, const std::string& type) {
    for (const char* t : {"hash:", "btree:", "texthash:", "pcre:", "regexp:", "inline:"})
        if (operand.starts_with(t)) {
            if (std::string_view(t) == "inline:") return operand;
            const std::string name = operand.substr(std::string_view(t).size());
            return std::string(t) + fs::absolute(name).lexically_normal().string();
        }
    return (type.empty() ? "hash" : type) + ":" + fs::absolute(operand).lexically_normal().string();
}

int build(const MapArgs& a, std::ostream& out, std::ostream& err) {
    for (const auto& operand : a.operands) {
        const std::string spec = spec_of(operand, a.type);
        const auto b = smx::table::buildable(spec);
        if (!b) {
            err << "smx map: " << spec << ": only hash: and btree: tables are built\n";
            return exit_map_error;
        }
        try {
            const auto r = smx::table::build(
                b->source, b->kind,
                a.aliases ? smx::table::Syntax::aliases : smx::table::Syntax::table,
                [&](const std::string& w) { err << "smx map: warning: " << w << '\n'; });
            out << b->source << ".db: " << r.entries << (r.entries == 1 ? " entry" : " entries");
            if (r.duplicates) out << ", " << r.duplicates << " duplicate" << (r.duplicates == 1 ? "" : "s") << " ignored";
            out << '\n';
        } catch (const std::exception& e) {
            err << "smx map: " << e.what() << '\n';
            return exit_map_error;
        }
    }
    return exit_ok;
}

int query(const MapArgs& a, std::istream& in, std::ostream& out, std::ostream& err) {
    const std::string spec = spec_of(a.operands[0], a.type);
    std::shared_ptr<const smx::table::Table> t;
    try {
        t = smx::table::open(spec);
    } catch (const smx::table::TableError& e) {
        err << "smx map: " << e.what() << '\n';
        return exit_map_error;
    }
    const auto one = [&](std::string_view key, bool with_key) {
        const auto l = t->find(key);
        if (l.failed()) {
            err << "smx map: " << spec << ": lookup of \"" << key << "\" failed\n";
            return exit_map_error;
        }
        if (!l.found()) return exit_map_not_found;
        if (with_key) out << key << '\t';
        out << l.value << '\n';
        return exit_map_found;
    };
    if (a.operands[1] != "-") return one(a.operands[1], false);
    // postmap -q -: "key<tab>value" for each key found; 0 when one was.
    int status = exit_map_not_found;
    std::string line;
    while (std::getline(in, line)) {
        std::string_view key = line;
        while (!key.empty() && (key.back() == '\r' || key.back() == ' ' || key.back() == '\t'))
            key.remove_suffix(1);
        while (!key.empty() && (key.front() == ' ' || key.front() == '\t')) key.remove_prefix(1);
        if (key.empty()) continue;
        const int r = one(key, true);
        if (r == exit_map_error) return r;
        if (r == exit_map_found) status = exit_map_found;
    }
    return status;
}

int dump(const MapArgs& a, std::ostream& out, std::ostream& err) {
    const std::string spec = spec_of(a.operands[0], a.type);
    try {
        smx::table::open(spec)->each(
            [&](std::string_view k, std::string_view v) { out << k << '\t' << v << '\n'; });
    } catch (const smx::table::TableError& e) {
        err << "smx map: " << e.what() << '\n';
        return exit_map_error;
    }
    return exit_ok;
}

} // namespace

int map_command(const std::vector<std::string>& ops, std::istream& in, std::ostream& out,
                std::ostream& err) {
    std::string why;
    const auto a = parse(ops, why);
    if (!a) {
        err << "smx: " << why << " (smx help map)\n";
        return exit_usage;
    }
    if (a->action == "build") return build(*a, out, err);
    if (a->action == "query") return query(*a, in, out, err);
    return dump(*a, out, err);
}

} // namespace smx::mcp
