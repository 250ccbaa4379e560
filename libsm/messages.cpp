#include "libsm/messages.hpp"

#include "libsm/panic.hpp"

#include <array>
#include <initializer_list>

namespace smx::msg {
namespace {

enum Tag : std::uint16_t {
    T_ROLE = 1, T_VERSION, T_PID, T_STATUS, T_TEXT, T_TA_ID, T_CLIENT_ADDR,
    T_CLIENT_NAME, T_HELO, T_SENDER, T_PARAMS, T_RCPT, T_CONTENT_ID, T_SIZE,
    T_ARRIVAL, T_DA_ID, T_IDX, T_ADDR, T_NEXTHOP, T_RELAY, T_CODE, T_ENHANCED,
    T_COMMAND, T_ARG, T_PEER_DSN, T_LOOP, T_SESSIONS, T_TRANSACTIONS, T_WAITING,
    T_CONTENT_ERROR, T_REJECTED, T_REASON, T_CLASS, T_COUNT, T_SETUP,
    T_OP, T_CLIENT, T_MAIL_LIMIT, T_RCPT_LIMIT, T_CONNECTIONS, T_RATE, T_GRANTED, T_ACTION,
};
// Optional tags: a reader that does not know one skips it.
constexpr std::uint16_t T_HOLD = rec::optional_tag | 1;
constexpr std::uint16_t T_MILTER_FAILURES = rec::optional_tag | 2;
constexpr std::uint16_t T_REFUSED = rec::optional_tag | 3;

// Where a field's value goes: a reference to a callable that lives for the
// apply() call it is given to (no std::function, no allocation per field).
class Setter {
public:
    template <class F>
    Setter(const F& f)  // NOLINT: built implicitly from the lambdas below
        : obj_(&f), call_([](const void* o, std::string_view v) { return (*static_cast<const F*>(o))(v); }) {}
    bool operator()(std::string_view v) const { return call_(obj_, v); }

private:
    const void* obj_;
    bool (*call_)(const void*, std::string_view);
};

// How one tag of a record is read: required or not, may it repeat, and the
// function that stores its value (false = malformed value).
struct Spec {
    std::uint16_t tag;
    bool required;
    bool repeated;
    Setter set;
};

auto str(std::string& dst) {
    return [&dst](std::string_view v) { dst.assign(v); return true; };
}
auto push(std::vector<std::string>& dst) {
    return [&dst](std::string_view v) { dst.emplace_back(v); return true; };
}
template <class Int>
auto num(Int& dst) {
    return [&dst](std::string_view v) {
        rec::Field f{0, v};
        if constexpr (sizeof(Int) == 8) {
            auto x = f.as_u64();
            if (!x) return false;
            dst = static_cast<Int>(*x);
        } else {
            auto x = f.as_u32();
            if (!x) return false;
            dst = static_cast<Int>(*x);
        }
        return true;
    };
}

constexpr std::size_t max_specs = 16;

bool apply(std::string_view body, std::initializer_list<Spec> specs, std::string& err) {
    if (specs.size() > max_specs) panic("a record kind with more than 16 tags");
    std::array<unsigned, max_specs> seen{};
    rec::FieldReader reader(body);
    rec::Field f;
    for (rec::FieldReader::Next n; (n = reader.next(f)) != rec::FieldReader::Next::end;) {
        if (n == rec::FieldReader::Next::truncated) {
            err = "truncated field";
            return false;
        }
        bool known = false;
        for (std::size_t i = 0; i < specs.size(); ++i) {
            const Spec& spec = specs.begin()[i];
            if (spec.tag != f.tag) continue;
            known = true;
            if (seen[i]++ && !spec.repeated) {
                err = "duplicate tag " + std::to_string(f.tag);
                return false;
            }
            if (!spec.set(f.value)) {
                err = "bad value for tag " + std::to_string(f.tag);
                return false;
            }
            break;
        }
        if (!known && !(f.tag & rec::optional_tag)) {
            err = "unknown mandatory tag " + std::to_string(f.tag);
            return false;
        }
    }
    for (std::size_t i = 0; i < specs.size(); ++i) {
        const Spec& spec = specs.begin()[i];
        if (spec.required && !seen[i]) {
            err = "missing tag " + std::to_string(spec.tag);
            return false;
        }
    }
    return true;
}

rec::Writer commit_fields(const TaCommit& m) {
    rec::Writer w;
    w.str(T_TA_ID, m.ta_id).str(T_CLIENT_ADDR, m.client_addr)
        .str(T_CLIENT_NAME, m.client_name).str(T_HELO, m.helo)
        .str(T_SENDER, m.sender).str(T_PARAMS, m.params);
    for (const auto& r : m.rcpts) {
        rec::Writer rw;
        rw.str(T_ADDR, r.addr).str(T_PARAMS, r.params);
        w.nested(T_RCPT, rw);
    }
    w.str(T_CONTENT_ID, m.content_id).u64(T_SIZE, m.size).u64(T_ARRIVAL, m.arrival_us);
    if (!m.hold.empty()) w.str(T_HOLD, m.hold);
    if (!m.refused.empty()) w.str(T_REFUSED, m.refused);
    return w;
}

std::optional<TaCommit> commit_from(std::string_view body, std::string& err) {
    TaCommit m;
    auto rcpt = [&m, &err](std::string_view v) {
        Recipient r;
        if (!apply(v, {{T_ADDR, true, false, str(r.addr)},
                       {T_PARAMS, false, false, str(r.params)}}, err))
            return false;
        m.rcpts.push_back(std::move(r));
        return true;
    };
    if (!apply(body, {{T_TA_ID, true, false, str(m.ta_id)},
                      {T_CLIENT_ADDR, true, false, str(m.client_addr)},
                      {T_CLIENT_NAME, false, false, str(m.client_name)},
                      {T_HELO, false, false, str(m.helo)},
                      {T_SENDER, true, false, str(m.sender)},
                      {T_PARAMS, false, false, str(m.params)},
                      {T_RCPT, true, true, rcpt},
                      {T_CONTENT_ID, true, false, str(m.content_id)},
                      {T_SIZE, true, false, num(m.size)},
                      {T_ARRIVAL, true, false, num(m.arrival_us)},
                      {T_HOLD, false, false, str(m.hold)},
                      {T_REFUSED, false, false, str(m.refused)}}, err))
        return std::nullopt;
    return m;
}

} // namespace

std::string encode(const Hello& m, std::uint64_t id) {
    return rec::Writer().str(T_ROLE, m.role).u32(T_VERSION, m.version)
        .u32(T_PID, m.pid).frame(HELLO, id);
}
std::string encode(const HelloAck& m, std::uint64_t id) {
    return rec::Writer().u32(T_STATUS, m.status).str(T_TEXT, m.text).frame(HELLO_ACK, id);
}
std::string encode(const TaCommit& m, std::uint64_t id) {
    return commit_fields(m).frame(TA_COMMIT, id);
}
std::string encode(const TaAck& m, std::uint64_t id) {
    return rec::Writer().str(T_TA_ID, m.ta_id)
        .u32(T_STATUS, static_cast<std::uint32_t>(m.status)).str(T_TEXT, m.text)
        .frame(TA_ACK, id);
}
std::string encode(const SmtpsLoad& m, std::uint64_t id) {
    rec::Writer w;
    w.u32(T_LOOP, m.loop).u64(T_SESSIONS, m.sessions).u64(T_TRANSACTIONS, m.transactions)
        .u64(T_WAITING, m.waiting);
    for (const auto& e : m.rejected)
        w.nested(T_REJECTED, rec::Writer().u32(T_REASON, static_cast<std::uint32_t>(e.reason))
                                 .u32(T_CLASS, e.reply_class).u64(T_COUNT, e.n));
    for (std::uint32_t a = 0; a < milter_actions; ++a)
        if (m.milter_failures[a] != 0)
            w.nested(T_MILTER_FAILURES,
                     rec::Writer().u32(T_ACTION, a).u64(T_COUNT, m.milter_failures[a]));
    return w.frame(SMTPS_LOAD, id);
}
std::string encode(const AnvilRequest& m, std::uint64_t id) {
    return rec::Writer().u32(T_OP, static_cast<std::uint32_t>(m.op)).str(T_CLIENT, m.client)
        .u32(T_MAIL_LIMIT, m.mail_limit).u32(T_RCPT_LIMIT, m.rcpt_limit).frame(ANVIL_REQ, id);
}
std::string encode(const AnvilReply& m, std::uint64_t id) {
    return rec::Writer().u32(T_CONNECTIONS, m.connections).u32(T_RATE, m.rate)
        .u32(T_GRANTED, m.rcpt_granted ? 1 : 0).frame(ANVIL_REPLY, id);
}
std::string encode(const Deliver& m, std::uint64_t id) {
    rec::Writer w;
    w.u64(T_DA_ID, m.da_id).str(T_TA_ID, m.ta_id).str(T_CONTENT_ID, m.content_id)
        .str(T_SENDER, m.sender).u64(T_SIZE, m.size);
    for (const auto& r : m.rcpts)
        w.nested(T_RCPT, rec::Writer().u32(T_IDX, r.idx).str(T_ADDR, r.addr).str(T_PARAMS, r.params));
    for (const auto& h : m.nexthops) w.str(T_NEXTHOP, h);
    w.str(T_PARAMS, m.params);
    return w.frame(DELIVER, id);
}
std::string to_string(const Reply& r) {
    std::string s = r.code ? std::to_string(r.code) : std::string();
    for (const std::string* part : {&r.enhanced, &r.text})
        if (!part->empty()) s += (s.empty() ? "" : " ") + *part;
    return s;
}

std::string encode(const Result& m, std::uint64_t id) {
    rec::Writer w;
    w.u64(T_DA_ID, m.da_id).str(T_RELAY, m.relay).u32(T_PEER_DSN, m.peer_dsn ? 1 : 0)
        .u64(T_SETUP, m.setup_us);
    for (const auto& r : m.rcpts)
        w.nested(T_RCPT, rec::Writer().u32(T_IDX, r.idx).u32(T_CODE, r.code)
                             .str(T_ENHANCED, r.enhanced).str(T_TEXT, r.text));
    if (!m.content_error.empty()) w.str(T_CONTENT_ERROR, m.content_error);
    return w.frame(RESULT, id);
}
std::string encode(const CtlRequest& m, std::uint64_t id) {
    rec::Writer w;
    w.str(T_COMMAND, m.command);
    for (const auto& a : m.args) w.str(T_ARG, a);
    return w.frame(CTL_REQ, id);
}
std::string encode(const CtlReply& m, std::uint64_t id) {
    return rec::Writer().u32(T_STATUS, m.status).str(T_TEXT, m.text).frame(CTL_REPLY, id);
}

namespace {
bool type_is(const rec::Frame& f, std::uint16_t t, std::string& err) {
    if (f.hdr.type == t) return true;
    err = "unexpected record type " + std::to_string(f.hdr.type);
    return false;
}
} // namespace

template <>
std::optional<Hello> decode<Hello>(const rec::Frame& f, std::string& err) {
    Hello m;
    if (!type_is(f, HELLO, err) ||
        !apply(f.body, {{T_ROLE, true, false, str(m.role)},
                        {T_VERSION, true, false, num(m.version)},
                        {T_PID, false, false, num(m.pid)}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<HelloAck> decode<HelloAck>(const rec::Frame& f, std::string& err) {
    HelloAck m;
    if (!type_is(f, HELLO_ACK, err) ||
        !apply(f.body, {{T_STATUS, true, false, num(m.status)},
                        {T_TEXT, false, false, str(m.text)}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<TaCommit> decode<TaCommit>(const rec::Frame& f, std::string& err) {
    if (!type_is(f, TA_COMMIT, err)) return std::nullopt;
    return commit_from(f.body, err);
}
template <>
std::optional<SmtpsLoad> decode<SmtpsLoad>(const rec::Frame& f, std::string& err) {
    SmtpsLoad m;
    auto rejected = [&m, &err](std::string_view v) {
        std::uint32_t reason = 0;
        RejectionCounts::Entry e{};
        if (!apply(v, {{T_REASON, true, false, num(reason)},
                       {T_CLASS, true, false, num(e.reply_class)},
                       {T_COUNT, true, false, num(e.n)}}, err))
            return false;
        if (reason >= rejection_reasons || (e.reply_class != 4 && e.reply_class != 5)) {
            err = "rejection count of reason " + std::to_string(reason) + ", class " +
                  std::to_string(e.reply_class);
            return false;
        }
        e.reason = static_cast<Rejection>(reason);
        m.rejected.push_back(e);
        return true;
    };
    auto milter_failures = [&m, &err](std::string_view v) {
        std::uint32_t action = 0;
        std::uint64_t n = 0;
        if (!apply(v, {{T_ACTION, true, false, num(action)}, {T_COUNT, true, false, num(n)}}, err))
            return false;
        if (action >= milter_actions) {
            err = "milter failure count of action " + std::to_string(action);
            return false;
        }
        m.milter_failures[action] += n;
        return true;
    };
    if (!type_is(f, SMTPS_LOAD, err) ||
        !apply(f.body, {{T_LOOP, true, false, num(m.loop)},
                        {T_SESSIONS, true, false, num(m.sessions)},
                        {T_TRANSACTIONS, true, false, num(m.transactions)},
                        {T_WAITING, true, false, num(m.waiting)},
                        {T_REJECTED, false, true, rejected},
                        {T_MILTER_FAILURES, false, true, milter_failures}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<AnvilRequest> decode<AnvilRequest>(const rec::Frame& f, std::string& err) {
    AnvilRequest m;
    std::uint32_t op = 0;
    if (!type_is(f, ANVIL_REQ, err) ||
        !apply(f.body, {{T_OP, true, false, num(op)},
                        {T_CLIENT, true, false, str(m.client)},
                        {T_MAIL_LIMIT, false, false, num(m.mail_limit)},
                        {T_RCPT_LIMIT, false, false, num(m.rcpt_limit)}}, err))
        return std::nullopt;
    if (op >= anvil_ops) {
        err = "anvil op " + std::to_string(op);
        return std::nullopt;
    }
    if (m.client.empty() || m.client.size() > max_anvil_client) {
        err = "anvil client of " + std::to_string(m.client.size()) + " bytes";
        return std::nullopt;
    }
    m.op = static_cast<AnvilOp>(op);
    return m;
}
template <>
std::optional<AnvilReply> decode<AnvilReply>(const rec::Frame& f, std::string& err) {
    AnvilReply m;
    std::uint32_t granted = 0;
    if (!type_is(f, ANVIL_REPLY, err) ||
        !apply(f.body, {{T_CONNECTIONS, true, false, num(m.connections)},
                        {T_RATE, true, false, num(m.rate)},
                        {T_GRANTED, false, false, num(granted)}}, err))
        return std::nullopt;
    if (granted > 1) {
        err = "bad anvil grant";
        return std::nullopt;
    }
    m.rcpt_granted = granted == 1;
    return m;
}
template <>
std::optional<TaAck> decode<TaAck>(const rec::Frame& f, std::string& err) {
    TaAck m;
    std::uint32_t st = 0;
    if (!type_is(f, TA_ACK, err) ||
        !apply(f.body, {{T_TA_ID, true, false, str(m.ta_id)},
                        {T_STATUS, true, false, num(st)},
                        {T_TEXT, false, false, str(m.text)}}, err))
        return std::nullopt;
    if (st > 2) {
        err = "bad ack status";
        return std::nullopt;
    }
    m.status = static_cast<AckStatus>(st);
    return m;
}
template <>
std::optional<Deliver> decode<Deliver>(const rec::Frame& f, std::string& err) {
    Deliver m;
    auto rcpt = [&m, &err](std::string_view v) {
        DeliverRcpt r;
        if (!apply(v, {{T_IDX, true, false, num(r.idx)},
                       {T_ADDR, true, false, str(r.addr)},
                       {T_PARAMS, false, false, str(r.params)}}, err))
            return false;
        m.rcpts.push_back(std::move(r));
        return true;
    };
    if (!type_is(f, DELIVER, err) ||
        !apply(f.body, {{T_DA_ID, true, false, num(m.da_id)},
                        {T_TA_ID, true, false, str(m.ta_id)},
                        {T_CONTENT_ID, true, false, str(m.content_id)},
                        {T_SENDER, true, false, str(m.sender)},
                        {T_SIZE, false, false, num(m.size)},
                        {T_RCPT, true, true, rcpt},
                        {T_NEXTHOP, true, true, push(m.nexthops)},
                        {T_PARAMS, false, false, str(m.params)}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<Result> decode<Result>(const rec::Frame& f, std::string& err) {
    Result m;
    auto rcpt = [&m, &err](std::string_view v) {
        RcptResult r;
        if (!apply(v, {{T_IDX, true, false, num(r.idx)},
                       {T_CODE, true, false, num(r.code)},
                       {T_ENHANCED, false, false, str(r.enhanced)},
                       {T_TEXT, false, false, str(r.text)}}, err))
            return false;
        if (r.code < 200 || r.code > 599) {
            err = "reply code out of range";
            return false;
        }
        m.rcpts.push_back(std::move(r));
        return true;
    };
    if (!type_is(f, RESULT, err) ||
        !apply(f.body, {{T_DA_ID, true, false, num(m.da_id)},
                        {T_RELAY, false, false, str(m.relay)},
                        {T_PEER_DSN, false, false, num(m.peer_dsn)},
                        {T_SETUP, false, false, num(m.setup_us)},
                        {T_RCPT, true, true, rcpt},
                        {T_CONTENT_ERROR, false, false, str(m.content_error)}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<CtlRequest> decode<CtlRequest>(const rec::Frame& f, std::string& err) {
    CtlRequest m;
    if (!type_is(f, CTL_REQ, err) ||
        !apply(f.body, {{T_COMMAND, true, false, str(m.command)},
                        {T_ARG, false, true, push(m.args)}}, err))
        return std::nullopt;
    return m;
}
template <>
std::optional<CtlReply> decode<CtlReply>(const rec::Frame& f, std::string& err) {
    CtlReply m;
    if (!type_is(f, CTL_REPLY, err) ||
        !apply(f.body, {{T_STATUS, true, false, num(m.status)},
                        {T_TEXT, false, false, str(m.text)}}, err))
        return std::nullopt;
    return m;
}

std::size_t recipients_size(std::span<const Recipient> rcpts) {
    std::size_t n = 0;
    for (const auto& r : rcpts) n += r.addr.size() + r.params.size() + rcpt_overhead;
    return n;
}

std::size_t envelope_size(std::string_view sender, std::string_view params, std::string_view helo,
                          std::span<const Recipient> rcpts) {
    return sender.size() + params.size() + helo.size() + recipients_size(rcpts);
}

std::string envelope_bytes(const TaCommit& m) { return std::string(commit_fields(m).fields()); }

std::optional<TaCommit> envelope_from_bytes(std::string_view body, std::string& err) {
    return commit_from(body, err);
}

} // namespace smx::msg
