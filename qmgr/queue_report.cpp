// The queue as an operator sees it: `smx queue` (text like mailq, or JSON
// lines like postqueue -j, with filters), `smx qshape` (postfix's
// age-by-domain table), `smx show` (like postcat -h, and the content page by
// page for `smx show --body`), `smx requeue`, and the messages `ALL` names
// for hold, release and delete. The active queue is copied on the
// event loop; DEFEDB is read on its strand and merged in (a recipient memory
// is working on shows memory's state); filtering, rendering and reading a
// content file happen there too, off the event loop.
#include "qmgr/qmgr.hpp"

#include "libsm/content_segment.hpp"

#include "libsm/domain.hpp"
#include "libsm/ids.hpp"
#include "libsm/json.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
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
    std::string sender, content_id, client;
    std::map<std::uint32_t, Line> rcpts;
};
using Listing = std::map<std::string, Entry>;

// A CTL reply is one record (at most smx::rec::max_body): a huge queue is
// listed up to this size, and the summary still counts everything.
constexpr std::size_t max_listing = 3u << 20;
// `smx show` prints at most this much of the header section.
constexpr std::size_t max_header = 64u << 10;
// `smx show --body` gets the content in pages of this size.
constexpr std::size_t content_page = 1u << 20;

// What the CLI sends (mcp/cli.cpp): "json", "domain=D", "sender=S"
// ("<>": the null sender), "older-than=SECONDS", a queue name for qshape,
// a queue id for show and requeue; for show also "envelope" (only the
// envelope records) or "content=OFFSET" (a page of the content).
struct Options {
    bool json = false;
    std::string domain;
    std::optional<std::string> sender;
    std::uint64_t older_than_s = 0;
    std::string queue = "all";
    std::string id;
    bool envelope = false;
    std::optional<std::uint64_t> content_from;
};

bool digits(std::string_view s, std::size_t max) {
    return !s.empty() && s.size() <= max && s.find_first_not_of("0123456789") == s.npos;
}

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
        } else if (v.starts_with("older-than=") && digits(v.substr(11), 12)) {
            o.older_than_s = std::stoull(a.substr(11));  // 12 digits: no overflow, in µs either
        } else if (a == "envelope") {
            o.envelope = true;
        } else if (v.starts_with("content=") && digits(v.substr(8), 12)) {
            o.content_from = std::stoull(a.substr(8));
        } else if (a == "active" || a == "deferred" || a == "all") {
            o.queue = a;
        } else if (smx::valid_ta_id(a) && o.id.empty()) {
            o.id = a;
        } else {
            err = "bad argument \"" + a + "\"";
            return std::nullopt;
        }
    }
    return o;
}

bool waiting(const Line& l) { return l.state == "deferred" || l.state == "held"; }

// postfix's queue names: hold (held in DEFEDB), deferred (waiting in
// DEFEDB, or on its way there), active (every other state: in memory).
const char* queue_of(const Line& l) {
    return l.state == "held" ? "hold" : l.state == "deferred" ? "deferred" : "active";
}

// A message's queue in postqueue -j: active while memory works on any of
// its recipients, hold when all are held, else deferred.
const char* queue_of(const Entry& e) {
    bool held = true;
    for (const auto& [idx, l] : e.rcpts) {
        const std::string_view q = queue_of(l);
        if (q == "active") return "active";
        held = held && q == "hold";
    }
    return held ? "hold" : "deferred";
}

// Drops recipients and messages the options exclude: another recipient
// domain or queue, another sender, younger than older-than.
void filter(Listing& all, const Options& o, std::uint64_t now_us) {
    for (auto it = all.begin(); it != all.end();) {
        Entry& e = it->second;
        std::erase_if(e.rcpts, [&](const auto& r) {
            const Line& l = r.second;
            if (!o.domain.empty() && smx::domain_of(l.addr) != o.domain) return true;
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

// One JSON object a line, each message with postqueue -j's fields (and
// ours after them: docs/operation.md); fields may be added, never renamed.
// Past max_listing a last line "... N more messages not listed", which the
// CLI writes to stderr.
std::string render_json(const Listing& all) {
    std::string out;
    std::uint64_t left_out = 0;
    for (const auto& [id, e] : all) {
        if (out.size() > max_listing) {
            ++left_out;
            continue;
        }
        out += fmt::format(R"({{"queue_name": "{}", "queue_id": "{}", "arrival_time": {}, )"
                           R"("message_size": {}, "forced_expire": false, "sender": {}, "recipients": [)",
                           queue_of(e), id, e.arrival_us / 1'000'000, e.size, smx::json_string(e.sender));
        const char* sep = "";
        for (const auto& [idx, l] : e.rcpts) {
            out += fmt::format(R"({}{{"address": {}, )", sep, smx::json_string(l.addr));
            if (!l.last_reply.empty())
                out += fmt::format(R"("delay_reason": {}, )", smx::json_string(l.last_reply));
            out += fmt::format(R"("state": "{}", "attempts": {}, "next_try": {}}})", l.state,
                               l.attempts,
                               l.next_try_us ? std::to_string(l.next_try_us / 1'000'000) : "null");
            sep = ", ";
        }
        out += "]}\n";
    }
    if (left_out)
        out += fmt::format("... {} more messages not listed (the listing stops at 3 MiB)\n", left_out);
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
            for (Row* r : {&rows[smx::domain_of(l.addr)], &total}) {
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
std::string read_headers(const smx::content::Store& store, const std::string& id, const Entry& e) {
    smx::content::Body body;
    std::string buf;
    int err = body.open(store, e.content_id, id, e.size);
    if (err) return fmt::format("(content {}: {})\n", e.content_id, err == ENOENT ? "missing" : body.why());
    if ((err = body.read_at(0, max_header, buf)))
        return fmt::format("(content {}: {})\n", e.content_id, std::strerror(err));
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

std::string render_envelope(const std::string& id, const Entry& e) {
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
    return out;
}

// What show asked for: the envelope and the header section, the envelope
// alone, or a page of the content as stored (CRLF; the CLI makes it LF).
smx::msg::CtlReply render_show(const smx::content::Store& store, const Options& o, const Entry& e) {
    if (o.envelope) return {0, render_envelope(o.id, e)};
    if (!o.content_from) {
        return {0, render_envelope(o.id, e) + fmt::format("*** HEADER RECORDS {} ***\n", o.id) +
                       read_headers(store, o.id, e) +
                       fmt::format("*** END OF MESSAGE {} ***\n", o.id)};
    }
    smx::content::Body body;
    std::string page;
    if (int err = body.open(store, e.content_id, o.id, e.size))
        return {1, fmt::format("content {}: {}", e.content_id, err == ENOENT ? "missing" : body.why())};
    if (int err = body.read_at(*o.content_from, content_page, page))
        return {1, fmt::format("content {}: {}", e.content_id, std::strerror(err))};
    return {0, std::move(page)};
}

void merge(Listing& all, const DeferredTa& t) {
    Entry& e = all[t.envelope.ta_id];
    e.size = t.envelope.size;
    e.arrival_us = t.envelope.arrival_us;
    e.sender = t.envelope.sender;
    e.content_id = t.envelope.content_id;
    if (!t.envelope.client_addr.empty())
        e.client = t.envelope.client_name + "[" + t.envelope.client_addr + "]";
    for (const auto& r : t.rcpts)
        e.rcpts.try_emplace(r.idx, Line{r.addr, r.held ? "held" : "deferred", smx::msg::to_string(r.last_reply),
                                        r.attempts, r.held ? 0 : r.next_try_us});
}

// The open recipients of the active queue (of one message when id is set),
// copied on the event loop.
std::shared_ptr<Listing> copy_active(const ActiveQueue& queue, const std::string& id) {
    auto all = std::make_shared<Listing>();
    queue.for_each([&](const Ta& ta) {
        if (!id.empty() && ta.id != id) return;
        Entry& e = (*all)[ta.id];
        e.size = ta.size();
        e.arrival_us = ta.arrival_us();
        e.sender = ta.sender();
        e.content_id = ta.content_id();
        e.client = ta.env->client_name + "[" + ta.env->client_addr + "]";
        for (std::uint32_t i = 0; i < ta.rcpts().size(); ++i) {
            const Rcpt& r = ta.rcpt(i);
            if (is_closed(r.state())) continue;
            e.rcpts[i] = Line{r.addr(), to_string(r.state()), smx::msg::to_string(r.last_reply()), r.attempts(), 0};
        }
    });
    return all;
}

} // namespace

asio::awaitable<void> Qmgr::ctl_report(smx::msg::CtlRequest req, CtlDone done) {
    std::string err;
    auto opts = parse(req.args, err);
    const bool show = req.command == "show";
    if (opts && show && opts->id.empty()) err = "usage: show QUEUE-ID [envelope | content=OFFSET]";
    if (opts && !show && (!opts->id.empty() || opts->envelope || opts->content_from))
        err = req.command + " takes no queue id";
    if (!err.empty()) co_return done({1, err});

    auto all = copy_active(queue_, show ? opts->id : std::string());
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
            if (it == all->end()) return smx::msg::CtlReply{1, "no such queue id"};
            return render_show(store, o, it->second);
        }
        if (command == "qshape") return smx::msg::CtlReply{0, render_qshape(*all, now)};
        return smx::msg::CtlReply{0, o.json ? render_json(*all) : render_text(*all)};
    };
    auto r = co_await dbq_.run(std::move(report));
    done(r ? std::move(*r) : smx::msg::CtlReply{1, "deferred queue unreadable (see the log)"});
}

asio::awaitable<std::optional<std::vector<std::string>>> Qmgr::queue_ids(
    std::vector<std::string> queues) {
    auto pick = [all = copy_active(queue_, {}), queues](Defedb& db) {
        db.for_each([&](const DeferredTa& t) { merge(*all, t); });
        std::vector<std::string> ids;
        for (const auto& [id, e] : *all) {
            const bool in = std::any_of(e.rcpts.begin(), e.rcpts.end(), [&](const auto& r) {
                return std::find(queues.begin(), queues.end(), queue_of(r.second)) != queues.end();
            });
            if (in) ids.push_back(id);
        }
        return ids;
    };
    co_return co_await dbq_.run(std::move(pick));
}

// Deferred recipients of one message, or of one recipient domain, due now
// (as `smx flush` for all of them). Held ones stay held.
asio::awaitable<void> Qmgr::ctl_requeue(smx::msg::CtlRequest req, CtlDone done) {
    std::string err;
    auto o = parse(req.args, err);
    if (o && (o->id.empty() == o->domain.empty() || o->sender || o->older_than_s || o->json ||
              o->queue != "all" || o->envelope || o->content_from))
        err = "usage: requeue QUEUE-ID | requeue domain=DOMAIN";
    if (!err.empty()) co_return done({1, err});
    const std::string what = o->id.empty() ? "domain " + o->domain : o->id;
    auto requeue = [o = *o, now = clock_.now_us()](Defedb& db) {
        return db.flush_all(now, [&](const DeferredRcpt& r) {
            return o.id.empty() ? smx::domain_of(r.addr) == o.domain : r.ta_id == o.id;
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
