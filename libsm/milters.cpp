#include "libsm/milters.hpp"

#include "libsm/message_parts.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace smx::milter {

namespace m = smx::milter;

struct Milters::Entry {
    Entry(asio::any_io_executor ex, m::ConnSettings s, MilterAction a)
        : conn(std::move(ex), std::move(s)), on_failure(a) {}
    m::Conn conn;
    MilterAction on_failure;
    bool failed = false;        // its default action stands for it
    bool skip_session = false;  // ACCEPT at connect or HELO
    bool skip_message = false;  // ACCEPT in a transaction
};

namespace {

MilterVerdict verdict(MilterVerdict::Kind k, std::string reply = {}) {
    MilterVerdict v;
    v.kind = k;
    v.reply = std::move(reply);
    return v;
}

// A REPLYCODE's lines as an SMTP reply.
std::string reply_of(const m::Reply& r) {
    std::string out;
    const std::string code = std::to_string(r.code);
    for (std::size_t i = 0; i < r.lines.size(); ++i) {
        if (i) out += "\r\n";
        out += code + (i + 1 == r.lines.size() ? " " : "-") + r.lines[i];
    }
    return out;
}

} // namespace

std::vector<std::string> command_args(std::string_view addr, std::string_view params) {
    std::vector<std::string> args{"<" + std::string(addr) + ">"};
    for (std::size_t at = 0; at < params.size();) {
        const auto sp = std::min(params.find(' ', at), params.size());
        if (sp > at) args.emplace_back(params.substr(at, sp - at));
        at = sp + 1;
    }
    return args;
}

Milters::Milters(asio::any_io_executor ex, const MilterConfig& cfg,
                 const std::vector<MilterEntry>& list, m::MacroLookup macros,
                 smx::msg::MilterFailureCounts& failures)
    : macros_(std::move(macros)), failures_(failures) {
    for (const auto& e : list) {
        m::ConnSettings s;
        s.socket = e.socket;
        std::string err;
        auto where = m::parse_socket(e.socket, err);
        if (!where) continue;  // checked at load: cannot happen
        s.where = std::move(*where);
        s.connect_timeout = e.connect_timeout.value_or(cfg.connect_timeout);
        s.command_timeout = e.command_timeout.value_or(cfg.command_timeout);
        s.content_timeout = e.content_timeout.value_or(cfg.content_timeout);
        s.version = cfg.protocol;
        entries_.push_back(
            std::make_unique<Entry>(ex, std::move(s), e.default_action.value_or(cfg.default_action)));
    }
}

Milters::~Milters() = default;

void Milters::fail(Entry& e, const m::Result& r) {
    spdlog::warn("milter {}: {}", e.conn.label(), r.what);
    e.failed = true;
    static_assert(static_cast<std::size_t>(MilterAction::quarantine) + 1 == msg::milter_actions);
    ++failures_[static_cast<std::size_t>(e.on_failure)];
}

std::optional<MilterVerdict> Milters::fold(Entry& e, m::Result& r, m::Cmd stage,
                                           MilterVerdict& out) {
    if (!e.failed && r.status == m::Result::error) fail(e, r);
    if (e.failed) {
        switch (e.on_failure) {
        case MilterAction::accept: e.skip_session = true; break;
        case MilterAction::quarantine: out.hold = "milter " + e.conn.label() + " failed"; break;
        case MilterAction::reject:
            return verdict(MilterVerdict::reject, "550 5.5.0 Service unavailable");
        case MilterAction::tempfail:
            return verdict(MilterVerdict::tempfail,
                           "451 4.7.1 Service unavailable - try again later");
        }
        return std::nullopt;
    }
    switch (r.reply.act) {
    case m::Act::accept:
        (stage == m::Cmd::connect || stage == m::Cmd::helo ? e.skip_session : e.skip_message) =
            true;
        break;
    case m::Act::reject: return verdict(MilterVerdict::reject, "550 5.7.1 Command rejected");
    case m::Act::tempfail:
        return verdict(MilterVerdict::tempfail, "451 4.7.1 Service unavailable - try again later");
    case m::Act::replycode:
        return verdict(r.reply.code / 100 == 4 ? MilterVerdict::tempfail : MilterVerdict::reject,
                       reply_of(r.reply));
    case m::Act::discard: return verdict(MilterVerdict::discard);
    default: break;  // continue
    }
    for (auto& edit : r.edits) {
        if (edit.act == m::Act::quarantine) {
            out.hold = edit.text.empty() ? "milter " + e.conn.label() : edit.text;
        } else {
            out.edits.push_back(std::move(edit));
        }
    }
    return std::nullopt;
}

template <class Call>
asio::awaitable<MilterVerdict> Milters::ask(m::Cmd stage, Call call) {
    MilterVerdict out;
    for (auto& e : entries_) {
        if (e->skip_session || e->skip_message) continue;
        m::Result r;
        if (!e->failed) r = co_await call(e->conn);
        if (auto end = fold(*e, r, stage, out)) co_return std::move(*end);
    }
    co_return out;
}

// The stages: ask()'s awaitable, each milter called with the stage's
// arguments (views and references into the caller's, who awaits it).
asio::awaitable<MilterVerdict> Milters::connect(std::string_view host, m::Family family,
                                                std::uint16_t port, std::string_view addr) {
    // A coroutine itself: call is a coroutine lambda whose captures must
    // outlive it (they live in this frame).
    auto call = [&](m::Conn& c) -> asio::awaitable<m::Result> {
        auto r = co_await c.open();
        if (r.status != m::Result::ok) co_return r;
        co_return co_await c.connect(macros_, host, family, port, addr);
    };
    co_return co_await ask(m::Cmd::connect, call);
}

asio::awaitable<MilterVerdict> Milters::helo(std::string_view name) {
    return ask(m::Cmd::helo, [this, name](m::Conn& c) { return c.helo(macros_, name); });
}

asio::awaitable<MilterVerdict> Milters::mail(const std::vector<std::string>& args) {
    return ask(m::Cmd::mail, [this, &args](m::Conn& c) { return c.mail(macros_, args); });
}

asio::awaitable<MilterVerdict> Milters::rcpt(const std::vector<std::string>& args) {
    return ask(m::Cmd::rcpt, [this, &args](m::Conn& c) { return c.rcpt(macros_, args); });
}

asio::awaitable<MilterVerdict> Milters::data() {
    return ask(m::Cmd::data, [this](m::Conn& c) { return c.data(macros_); });
}

asio::awaitable<MilterVerdict> Milters::unknown(std::string_view line) {
    return ask(m::Cmd::unknown, [this, line](m::Conn& c) { return c.unknown(macros_, line); });
}

asio::awaitable<MilterVerdict> Milters::header(std::string_view field) {
    const auto colon = field.find(':');
    const std::string_view name = field.substr(0, colon);
    const std::string_view value =
        colon == std::string_view::npos ? std::string_view() : field.substr(colon + 1);
    return ask(m::Cmd::header,
               [this, name, value](m::Conn& c) { return c.header(macros_, name, value); });
}

asio::awaitable<MilterVerdict> Milters::end_of_headers() {
    return ask(m::Cmd::eoh, [this](m::Conn& c) { return c.eoh(macros_); });
}

asio::awaitable<MilterVerdict> Milters::body(std::string_view bytes) {
    return ask(m::Cmd::body, [this, bytes](m::Conn& c) { return c.body(macros_, bytes); });
}

asio::awaitable<MilterVerdict> Milters::end_of_message(std::size_t max_body) {
    auto v = co_await ask(m::Cmd::eob,
                          [this, max_body](m::Conn& c) { return c.eom(macros_, max_body); });
    for (auto& e : entries_) e->skip_message = false;
    co_return v;
}

namespace {
// What MessageParts passes on of the stored content.
struct PartsSink {
    std::vector<std::string> fields;
    bool ended = false, blank_line = false;
    std::string bytes;  // body bytes not yet sent
    void header(std::string_view f) { fields.emplace_back(f); }
    void end_of_headers(bool blank) { ended = true, blank_line = blank; }
    void body(std::string_view b) { bytes.append(b); }
};
} // namespace

asio::awaitable<MilterMessage> Milters::message(const ContentRead& read, std::size_t max_body) {
    MilterMessage out;
    PartsSink sink;
    smx::MessageParts parts;
    std::size_t sent = 0;
    bool eoh_sent = false;
    MilterVerdict& v = out.verdict;
    std::string hold;
    std::string piece;
    for (std::uint64_t at = 0;;) {
        if (!read(at, piece)) {
            out.read_failed = true;
            break;
        }
        if (piece.empty()) {
            parts.finish(sink);
        } else {
            at += piece.size();
            parts.feed(piece, sink);
        }
        for (; sent < sink.fields.size() && v.kind == MilterVerdict::cont; ++sent)
            v = co_await header(sink.fields[sent]);
        if (sink.ended && !eoh_sent && v.kind == MilterVerdict::cont) {
            eoh_sent = true;
            v = co_await end_of_headers();
        }
        if (!sink.bytes.empty() && v.kind == MilterVerdict::cont) {
            v = co_await body(sink.bytes);
            sink.bytes.clear();
        }
        if (!v.hold.empty()) hold = v.hold;
        if (v.kind != MilterVerdict::cont || piece.empty()) break;
    }
    if (!out.read_failed && v.kind == MilterVerdict::cont) {
        v = co_await end_of_message(max_body);
        out.ended = true;
    }
    if (v.hold.empty()) v.hold = std::move(hold);
    out.fields = std::move(sink.fields);
    out.blank_line = sink.blank_line;
    co_return out;
}

asio::awaitable<void> Milters::abort() {
    for (auto& e : entries_) {
        e->skip_message = false;
        if (e->failed || e->skip_session) continue;
        const auto r = co_await e->conn.abort();
        if (r.status == m::Result::error) fail(*e, r);
    }
}

asio::awaitable<void> Milters::quit() {
    for (auto& e : entries_) {
        if (e->failed) continue;
        co_await e->conn.quit();
    }
}

} // namespace smx::milter
