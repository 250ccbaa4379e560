// The queue as an operator sees it: `smx queue` (text like mailq, or JSON,
// with filters), `smx qshape` (postfix's age-by-domain table), `smx show`
// (like postcat -h) and `smx requeue`. The active queue is copied on the
// event loop; DEFEDB is read on its strand and merged in (a recipient memory
// is working on shows memory's state); filtering, rendering and reading a
// content file happen there too, off the event loop.
#include "qmgr.hpp"

#include "content_segment.hpp"

#include "domain.hpp"
#include "ids.hpp"
#include "json.hpp"

#include <spdlog/spdlog.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

namespace smx::qmgr {

namespace {

std::string fmt_time(std::uint64_t unix_us) {
    const std::time_t t = static_cast<std::time_t>(unix_us / 1'000'000);
    std::tm tm{};
    ::gmtime_r(&t, &tm);
    char buf[32];
    std::strftime(buf, sizeof buf, "%a %b %d %H:%M:%S", &tm);
    return buf;
}

// One line per recipient of the listing.
struct Line {
    std::string addr, state, last_reply;
    std::uint32_t attempts = 0;
    std::uint64_t next_try_us = 0;
};
struct Entry {
    std::uint64_t size = 0, arrival_us = 0;
    std::string sender, cdb_id, client;
    std::map<std::uint32_t, Line> rcpts;
};
using Listing = std::map<std::string, Entry>;

// A CTL reply is one record (at most sm::rec::max_body): a huge queue is
// listed up to this size, and the summary still counts everything.
constexpr std::size_t max_listing = 3u << 20;
// `smx show` prints at most this much of the header section.
constexpr std::size_t max_header = 64u << 10;

// What the CLI sends (mcp/cli.cpp): "json", "domain=D", "sender=S"
// ("<>": the null sender), "older-than=SECONDS", a queue name for qshape,
// a queue id for show and requeue.
struct Options {
    bool json = false;
    std::string domain;
    std::optional<std::string> sender;
    std::uint64_t older_than_s = 0;
    std::string queue = "all";
    std::string id;
};

std::string lower(std::string s) {
    for (char& c : s)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    return s;
}

std::optional<Options> parse(const std::vector<std::string>& args, std::string& err) {
    Options o;
    for (const auto& a : args) {
        const std::string_view v(a);
        if (a == "json") {
            o.json = true;
        } else if (v.starts_with("domain=") && a.size() > 7) {
            o.domain = lower(a.substr(7));
        } else if (v.starts_with("sender=")) {
            o.sender = a.substr(7) == "<>" ? "" : lower(a.substr(7));
        } else if (v.starts_with("older-than=") && a.size() > 11 && a.size() <= 11 + 12 &&
                   a.find_first_not_of("0123456789", 11) == a.npos) {
            o.older_than_s = std::stoull(a.substr(11));  // 12 digits: no overflow, in µs either
        } else if (a == "active" || a == "deferred" || a == "all") {
            o.queue = a;
        } else if (sm::valid_ta_id(a) && o.id.empty()) {
            o.id = a;
        } else {
            err = "bad argument \"" + a + "\"";
            return std::nullopt;
        }
    }
    return o;
}

bool waiting(const Line& l) { return l.state == "deferred" || l.state == "held"; }

// Drops recipients and messages the options exclude: another recipient
// domain or queue, another sender, younger than older-than.
void filter(Listing& all, const Options& o, std::uint64_t now_us) {
    for (auto it = all.begin(); it != all.end();) {
        Entry& e = it->second;
        std::erase_if(e.rcpts, [&](const auto& r) {
            const Line& l = r.second;
            if (!o.domain.empty() && sm::domain_of(l.addr) != o.domain) return true;
            return (o.queue == "active" && waiting(l)) || (o.queue == "deferred" && !waiting(l));
        });
        const bool drop = e.rcpts.empty() || (o.sender && lower(e.sender) != *o.sender) ||
                          (o.older_than_s && e.arrival_us + o.older_than_s * 1'000'000 > now_us);
        it = drop ? all.erase(it) : std::next(it);
    }
}

std::string render_text(const Listing& all) {
    std::string out = "-Queue ID-        --Size-- ----Arrival Time---- -Sender/Recipient-------\n";
    std::uint64_t bytes = 0, left_out = 0;
    for (const auto& [id, e] : all) {
        bytes += e.size;
        if (out.size() > max_listing) {
            ++left_out;
            continue;
        }
        out += fmt::format("{:<17} {:>8} {:<20} {}\n", id, e.size, fmt_time(e.arrival_us),
                           e.sender.empty() ? "MAILER-DAEMON" : e.sender);
        for (const auto& [idx, l] : e.rcpts) {
            out += fmt::format("    {} ({}, attempts={}", l.addr, l.state, l.attempts);
            if (l.next_try_us) out += ", next try " + fmt_time(l.next_try_us) + " UTC";
            out += ")\n";
            if (!l.last_reply.empty()) out += "        (" + l.last_reply + ")\n";
        }
        out += '\n';
    }
    if (left_out) out += fmt::format("... {} more requests not listed\n", left_out);
    out += fmt::format("-- {} Kbytes in {} requests.\n", (bytes + 1023) / 1024, all.size());
    return out;
}

// One object; each message on a line of its own. The shape is documented in
// docs/operation.md and kept stable: fields may be added, never renamed.
std::string render_json(const Listing& all) {
    std::string out = "{\"messages\": [";
    std::uint64_t bytes = 0, listed = 0;
    for (const auto& [id, e] : all) {
        bytes += e.size;
        if (out.size() > max_listing) continue;
        out += listed++ ? ",\n  " : "\n  ";
        out += fmt::format(R"({{"id": "{}", "arrival": {}, "size": {}, "sender": {}, "recipients": [)",
                           id, e.arrival_us / 1'000'000, e.size, sm::json_string(e.sender));
        const char* sep = "";
        for (const auto& [idx, l] : e.rcpts) {
            out += fmt::format(R"({}{{"address": {}, "state": "{}", "attempts": {}, "next_try": {}, "last_reply": {}}})",
                               sep, sm::json_string(l.addr), l.state, l.attempts,
                               l.next_try_us ? std::to_string(l.next_try_us / 1'000'000) : "null",
                               l.last_reply.empty() ? "null" : sm::json_string(l.last_reply));
            sep = ", ";
        }
        out += "]}";
    }
    out += fmt::format("\n], \"total\": {}, \"listed\": {}, \"bytes\": {}}}\n", all.size(), listed,
                       bytes);
    return out;
}

// postfix's qshape: recipients by domain (rows, most first) and by the age
// of their message in minutes (columns: under 5, 5 to 10, ..., over 1280).
std::string render_qshape(const Listing& all, std::uint64_t now_us) {
    static constexpr std::array<std::uint64_t, 9> limits{5, 10, 20, 40, 80, 160, 320, 640, 1280};
    using Row = std::array<std::uint64_t, limits.size() + 2>;  // T, the buckets, 1280+
    std::map<std::string, Row> rows;
    Row total{};
    for (const auto& [id, e] : all) {
        const std::uint64_t minutes = now_us > e.arrival_us ? (now_us - e.arrival_us) / 60'000'000 : 0;
        std::size_t b = 0;
        while (b < limits.size() && minutes >= limits[b]) ++b;
        for (const auto& [idx, l] : e.rcpts) {
            for (Row* r : {&rows[sm::domain_of(l.addr)], &total}) {
                ++(*r)[0];
                ++(*r)[b + 1];
            }
        }
    }
    std::vector<std::pair<std::string, Row>> sorted(rows.begin(), rows.end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.second[0] > b.second[0]; });
    std::size_t width = 5;
    for (const auto& [d, r] : sorted) width = std::max(width, std::min<std::size_t>(d.size(), 60));
    auto line = [&](std::string_view name, const auto& cells) {
        std::string s = fmt::format("{:>{}}", name, width);
        for (const auto& c : cells) s += fmt::format(" {:>5}", c);
        return s + '\n';
    };
    std::string out = line("", std::array<std::string_view, 11>{"T", "5", "10", "20", "40", "80",
                                                                "160", "320", "640", "1280", "1280+"});
    out += line("TOTAL", total);
    std::size_t left_out = 0;
    for (const auto& [d, r] : sorted) {
        if (out.size() > max_listing) ++left_out;
        else out += line(d.empty() ? "(none)" : d, r);
    }
    if (left_out) out += fmt::format("... {} more domains not listed\n", left_out);
    return out;
}

// The header section of a message's content, LF line ends, at most max_header.
std::string read_headers(const sm::content::Store& store, const std::string& id, const Entry& e) {
    sm::content::Body body;
    std::string buf;
    int err = body.open(store, e.cdb_id, id, e.size);
    if (err) return fmt::format("(content {}: {})\n", e.cdb_id, err == ENOENT ? "missing" : body.why());
    if ((err = body.read_at(0, max_header, buf)))
        return fmt::format("(content {}: {})\n", e.cdb_id, std::strerror(err));
    std::string out;
    bool cut = true;
    for (std::size_t pos = 0; pos < buf.size();) {
        const auto nl = buf.find('\n', pos);
        if (nl == buf.npos) break;  // a partial last line: over max_header
        std::string_view l(buf.data() + pos, nl - pos);
        if (l.ends_with('\r')) l.remove_suffix(1);
        if (l.empty()) {
            cut = false;
            break;
        }
        out.append(l) += '\n';
        pos = nl + 1;
    }
    if (cut && buf.size() == max_header) out += "(header section cut at 64 KiB)\n";
    return out;
}

std::string render_show(const std::string& id, const Entry& e, const std::string& headers) {
    std::string out = fmt::format("*** ENVELOPE RECORDS {} ***\n", id);
    out += fmt::format("message_size: {}\narrival_time: {} UTC\n", e.size, fmt_time(e.arrival_us));
    if (!e.client.empty()) out += "client: " + e.client + '\n';
    out += "sender: " + e.sender + '\n';
    for (const auto& [idx, l] : e.rcpts) {
        out += fmt::format("recipient: {} ({}, attempts={}", l.addr, l.state, l.attempts);
        if (l.next_try_us) out += ", next try " + fmt_time(l.next_try_us) + " UTC";
        out += ")\n";
        if (!l.last_reply.empty()) out += "    last reply: " + l.last_reply + '\n';
    }
    out += fmt::format("*** HEADER RECORDS {} ***\n", id);
    out += headers;
    return out + fmt::format("*** END OF MESSAGE {} ***\n", id);
}

void merge(Listing& all, const DeferredTa& t) {
    Entry& e = all[t.envelope.ta_id];
    e.size = t.envelope.size;
    e.arrival_us = t.envelope.arrival_us;
    e.sender = t.envelope.sender;
    e.cdb_id = t.envelope.cdb_id;
    if (!t.envelope.client_addr.empty())
        e.client = t.envelope.client_name + "[" + t.envelope.client_addr + "]";
    for (const auto& r : t.rcpts)
        e.rcpts.try_emplace(r.idx, Line{r.addr, r.held ? "held" : "deferred", sm::msg::to_string(r.last_reply),
                                        r.attempts, r.held ? 0 : r.next_try_us});
}

} // namespace

asio::awaitable<void> Qmgr::ctl_report(sm::msg::CtlRequest req, CtlDone done) {
    std::string err;
    auto opts = parse(req.args, err);
    const bool show = req.command == "show";
    if (opts && show && opts->id.empty()) err = "usage: show QUEUE-ID";
    if (opts && !show && !opts->id.empty()) err = req.command + " takes no queue id";
    if (!err.empty()) co_return done({1, err});

    auto all = std::make_shared<Listing>();
    queue_.for_each([&](const Ta& ta) {
        if (show && ta.id != opts->id) return;
        Entry& e = (*all)[ta.id];
        e.size = ta.size();
        e.arrival_us = ta.arrival_us();
        e.sender = ta.sender();
        e.cdb_id = ta.cdb_id();
        e.client = ta.env->client_name + "[" + ta.env->client_addr + "]";
        for (std::uint32_t i = 0; i < ta.rcpts().size(); ++i) {
            const Rcpt& r = ta.rcpt(i);
            if (is_closed(r.state())) continue;
            e.rcpts[i] = Line{r.addr(), to_string(r.state()), sm::msg::to_string(r.last_reply()), r.attempts(), 0};
        }
    });
    const std::string command = req.command;
    auto report = [all, o = *opts, show, command, store = store_, now = clock_.now_us()](Defedb& db) {
        if (show) {
            if (auto t = db.get(o.id)) merge(*all, *t);
        } else {
            db.for_each([&](const DeferredTa& t) { merge(*all, t); });
        }
        filter(*all, o, now);
        if (show) {
            auto it = all->find(o.id);
            if (it == all->end()) return sm::msg::CtlReply{1, "no such queue id"};
            const Entry& e = it->second;
            return sm::msg::CtlReply{
                0, render_show(o.id, e, read_headers(store, o.id, e))};
        }
        if (command == "qshape") return sm::msg::CtlReply{0, render_qshape(*all, now)};
        return sm::msg::CtlReply{0, o.json ? render_json(*all) : render_text(*all)};
    };
    auto r = co_await dbq_.run(std::move(report));
    done(r ? std::move(*r) : sm::msg::CtlReply{1, "deferred queue unreadable (see the log)"});
}

// Deferred recipients of one message, or of one recipient domain, due now
// (as `smx flush` for all of them). Held ones stay held.
asio::awaitable<void> Qmgr::ctl_requeue(sm::msg::CtlRequest req, CtlDone done) {
    std::string err;
    auto o = parse(req.args, err);
    if (o && (o->id.empty() == o->domain.empty() || o->sender || o->older_than_s || o->json ||
              o->queue != "all"))
        err = "usage: requeue QUEUE-ID | requeue domain=DOMAIN";
    if (!err.empty()) co_return done({1, err});
    const std::string what = o->id.empty() ? "domain " + o->domain : o->id;
    auto requeue = [o = *o, now = clock_.now_us()](Defedb& db) {
        return db.flush_all(now, [&](const DeferredRcpt& r) {
            return o.id.empty() ? sm::domain_of(r.addr) == o.domain : r.ta_id == o.id;
        });
    };
    const auto n = co_await dbq_.run(std::move(requeue));
    if (!n) co_return done({1, "requeue failed (see the log)"});
    if (*n == 0 && !o->id.empty()) co_return done({1, what + ": no deferred recipients waiting"});
    spdlog::info("requeue {}: {} deferred recipients due now", what, *n);
    deferred_.due_now();
    done({0, fmt::format("{}: {} deferred recipients scheduled now\n", what, *n)});
}

} // namespace smx::qmgr
