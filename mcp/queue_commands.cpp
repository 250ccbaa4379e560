#include "mcp/queue_commands.hpp"

#include "libsm/channel.hpp"
#include "libsm/ids.hpp"

#include <cstdint>
#include <utility>
#include <vector>

namespace smx::mcp {
namespace {

constexpr std::size_t max_id_line = 256;

struct Ctl {
    const Args& args;
    std::string socket;
    std::ostream& err;

    // nullopt after saying why QMGR cannot be reached.
    std::optional<smx::msg::CtlReply> call(smx::msg::CtlRequest req) const {
        std::string why;
        auto reply = smx::ctl_call(socket, req, why);
        if (!reply)
            err << "smx: cannot reach qmgr at " << socket << " (config: " << args.config_source
                << "): " << why << '\n';
        return reply;
    }

    // QMGR's refusal, or its report when an id was not found: each line
    // as "smx: COMMAND: line".
    void refused(std::string_view text) const {
        if (text.empty()) text = "failed";
        while (!text.empty()) {
            const auto nl = text.find('\n');
            err << "smx: " << args.command << ": " << text.substr(0, nl) << '\n';
            text = nl == text.npos ? std::string_view{} : text.substr(nl + 1);
        }
    }
};

void print_with_newline(std::ostream& out, std::string_view text) {
    out << text;
    if (!text.empty() && text.back() != '\n') out << '\n';
}

// hold, release, delete with queue ids: smx::msg::max_ctl_ids a request,
// those of `-` sent as they are read.
int ids_command(const Ctl& q, std::istream& in, std::ostream& out) {
    int status = exit_ok;
    std::vector<std::string> batch;
    auto send = [&] {
        if (batch.empty()) return true;
        const auto reply = q.call({q.args.command, std::exchange(batch, {})});
        if (!reply) return false;
        if (reply->status == 0) {
            print_with_newline(out, reply->text);
            return true;
        }
        // Some ids were not found ("ID: no such queue id", to stderr; the
        // others' lines to stdout), or QMGR refused the request.
        status = exit_failed;
        std::string_view text = reply->text;
        while (!text.empty()) {
            const auto nl = text.find('\n');
            const std::string_view line = text.substr(0, nl);
            text = nl == text.npos ? std::string_view{} : text.substr(nl + 1);
            const auto colon = line.find(": ");
            if (colon != line.npos && smx::valid_ta_id(line.substr(0, colon)) &&
                line.substr(colon + 2) != "no such queue id")
                out << line << '\n';
            else
                q.refused(line);
        }
        return true;
    };
    auto add = [&](std::string id) {
        batch.push_back(std::move(id));
        return batch.size() < smx::msg::max_ctl_ids || send();
    };
    for (const auto& op : q.args.operands) {
        if (op != "-") {
            if (!add(op)) return exit_failed;
            continue;
        }
        IdReader ids(in, q.args.command, q.err);
        while (auto id = ids.next())
            if (!add(std::move(*id))) return exit_failed;
        if (ids.skipped()) status = exit_failed;
    }
    return send() ? status : exit_failed;
}

// show --body: the envelope, then the content page by page (postcat -bh).
int show_body(const Ctl& q, std::ostream& out) {
    const std::string& id = q.args.operands.front();
    const auto envelope = q.call({"show", {id, "envelope"}});
    if (!envelope) return exit_failed;
    if (envelope->status != 0) {
        q.refused(envelope->text);
        return exit_failed;
    }
    out << envelope->text << "*** MESSAGE CONTENTS " << id << " ***\n";
    std::uint64_t offset = 0;
    bool cr = false;
    char last = '\n';
    for (;;) {
        const auto page = q.call({"show", {id, "content=" + std::to_string(offset)}});
        if (!page) return exit_failed;
        if (page->status != 0) {
            q.refused(page->text);
            return exit_failed;
        }
        if (page->text.empty()) break;
        offset += page->text.size();
        const std::string text = to_lf(page->text, cr);
        if (!text.empty()) last = text.back();
        out << text;
    }
    if (cr) out << '\r';
    if (cr || last != '\n') out << '\n';
    out << "*** END OF MESSAGE " << id << " ***\n";
    return exit_ok;
}

// queue --json: the objects on stdout; QMGR's last line when the listing
// was cut ("... N more messages not listed") on stderr.
void print_json_lines(const Ctl& q, std::string_view text, std::ostream& out) {
    const auto start = text.size() < 2 ? 0 : text.rfind('\n', text.size() - 2) + 1;
    if (text.substr(start).starts_with("... ")) {
        q.err << "smx: queue: " << text.substr(start);
        text = text.substr(0, start);
    }
    out << text;
}

} // namespace

std::optional<std::string> IdReader::next() {
    std::string line;
    for (;;) {
        line.clear();
        bool long_line = false;
        int ch;
        while ((ch = in_.get()) != std::istream::traits_type::eof() && ch != '\n') {
            if (line.size() < max_id_line) line += static_cast<char>(ch);
            else long_line = true;
        }
        if (ch != '\n' && line.empty()) return std::nullopt;
        ++line_;
        const auto first = line.find_first_not_of(" \t\r");
        const auto last = line.find_last_not_of(" \t\r*!");
        if (first == line.npos || last == line.npos || last < first) line.clear();
        else line = line.substr(first, last - first + 1);
        if (line.empty() && !long_line) continue;
        if (!long_line && smx::valid_ta_id(line)) return line;
        warn_ << "smx: " << command_ << ": line " << line_ << ": '"
              << line.substr(0, 40) << (long_line || line.size() > 40 ? "...'" : "'")
              << " is not a queue id; skipped\n";
        skipped_ = true;
    }
}

std::string to_lf(std::string_view page, bool& cr) {
    std::string out;
    out.reserve(page.size() + 1);
    for (const char ch : page) {
        if (cr && ch != '\n') out += '\r';
        cr = ch == '\r';
        if (!cr) out += ch;
    }
    return out;
}

int ctl_command(const Args& args, std::istream& in, std::ostream& out, std::ostream& err) {
    auto cfg = load_checked(args.config_path, err);
    if (!cfg) return exit_config;
    const Ctl q{args, cfg->qmgr_socket(), err};
    const std::string& c = args.command;
    if ((c == "hold" || c == "release" || c == "delete") && args.operands.front() != "ALL")
        return ids_command(q, in, out);
    if (c == "show" && args.body) return show_body(q, out);

    smx::msg::CtlRequest req{c, args.filters};
    if (args.json && c == "queue") req.args.push_back("json");
    req.args.insert(req.args.end(), args.operands.begin(), args.operands.end());
    // postqueue -s: QMGR's requeue of a domain.
    if (c == "flush" && !args.operands.empty()) req = {"requeue", {"domain=" + args.operands[0]}};
    const auto reply = q.call(std::move(req));
    if (!reply) return exit_failed;
    if (reply->status != 0) {
        q.refused(reply->text);
        return exit_failed;
    }
    if (args.json && c == "stats") out << stats_to_json(reply->text);
    else if (args.json) print_json_lines(q, reply->text, out);
    else print_with_newline(out, reply->text);
    return exit_ok;
}

} // namespace smx::mcp
