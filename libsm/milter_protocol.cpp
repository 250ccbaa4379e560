#include "libsm/milter_protocol.hpp"

#include "libsm/panic.hpp"

#include <charconv>

namespace smx::milter {

namespace {

void put_u32(std::string& out, std::uint32_t v) {
    out.push_back(static_cast<char>(v >> 24));
    out.push_back(static_cast<char>(v >> 16));
    out.push_back(static_cast<char>(v >> 8));
    out.push_back(static_cast<char>(v));
}

void put_string(std::string& out, std::string_view s) {
    out.append(s);
    out.push_back('\0');
}

// Starts a packet: the length is filled in by end_packet.
std::size_t begin_packet(std::string& out, char cmd) {
    const std::size_t at = out.size();
    put_u32(out, 0);
    out.push_back(cmd);
    return at;
}

void end_packet(std::string& out, std::size_t at) {
    const std::size_t len = out.size() - at - 4;
    if (len > 0xffffffffu) smx::panic("milter packet of " + std::to_string(len) + " octets");
    for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>(len >> (24 - 8 * i));
}

// The reader of one packet's data: strings to NUL, integers in network order.
class Data {
public:
    explicit Data(std::string_view d) : d_(d) {}
    bool u32(std::uint32_t& v) {
        if (d_.size() < 4) return false;
        v = 0;
        for (int i = 0; i < 4; ++i) v = (v << 8) | static_cast<unsigned char>(d_[i]);
        d_.remove_prefix(4);
        return true;
    }
    bool string(std::string& s) {
        const auto nul = d_.find('\0');
        if (nul == std::string_view::npos) return false;
        s.assign(d_.substr(0, nul));
        d_.remove_prefix(nul + 1);
        return true;
    }
    bool empty() const { return d_.empty(); }
    std::string_view rest() const { return d_; }

private:
    std::string_view d_;
};

// The step flags of each command: the milter does not want it / sends no
// reply to it (0: no such flag).
struct Steps {
    std::uint32_t no, nr;
};
Steps steps_of(Cmd c) {
    switch (c) {
    case Cmd::connect: return {step::no_connect, step::nr_connect};
    case Cmd::helo: return {step::no_helo, step::nr_helo};
    case Cmd::mail: return {step::no_mail, step::nr_mail};
    case Cmd::rcpt: return {step::no_rcpt, step::nr_rcpt};
    case Cmd::data: return {step::no_data, step::nr_data};
    case Cmd::header: return {step::no_headers, step::nr_header};
    case Cmd::eoh: return {step::no_eoh, step::nr_eoh};
    case Cmd::body: return {step::no_body, step::nr_body};
    case Cmd::unknown: return {step::no_unknown, step::nr_unknown};
    default: return {0, 0};
    }
}

std::uint32_t steps_of_version(std::uint32_t v) {
    return v >= 6 ? step::v6 : v >= 4 ? step::v4 : v == 3 ? step::v3 : step::v2;
}

std::string too_short(char code) { return name(code) + ": packet too short"; }

// "550-5.7.1 a\r\n550 5.7.1 b" into code and line texts.
std::string decode_replycode(std::string_view text, Reply& out) {
    if (text.size() < 3) return "SMFIR_REPLYCODE: no reply code";
    for (int i = 0; i < 3; ++i)
        if (text[i] < '0' || text[i] > '9') return "SMFIR_REPLYCODE: no reply code";
    if ((text[0] != '4' && text[0] != '5') || text[1] > '5')
        return "SMFIR_REPLYCODE: code " + std::string(text.substr(0, 3)) + " is not 4XX or 5XX";
    out.code = (text[0] - '0') * 100 + (text[1] - '0') * 10 + (text[2] - '0');
    const std::string_view code = text.substr(0, 3);
    for (;;) {
        const auto eol = text.find("\r\n");
        const std::string_view line = text.substr(0, eol);
        if (line.size() < 3 || line.substr(0, 3) != code)
            return "SMFIR_REPLYCODE: line without code " + std::string(code);
        const bool last = eol == std::string_view::npos;
        if (line.size() > 3) {
            const char sep = line[3];
            if (sep != ' ' && sep != '-')
                return "SMFIR_REPLYCODE: no space or hyphen after the code";
            if ((sep == ' ') != last) return "SMFIR_REPLYCODE: continuation marks out of step";
            out.lines.emplace_back(line.substr(4));
        } else {
            if (!last) return "SMFIR_REPLYCODE: continuation marks out of step";
            out.lines.emplace_back();
        }
        if (last) return {};
        text.remove_prefix(eol + 2);
    }
}

} // namespace

std::string_view name(Cmd c) {
    switch (c) {
    case Cmd::abort: return "SMFIC_ABORT";
    case Cmd::body: return "SMFIC_BODY";
    case Cmd::connect: return "SMFIC_CONNECT";
    case Cmd::macro: return "SMFIC_MACRO";
    case Cmd::eob: return "SMFIC_BODYEOB";
    case Cmd::helo: return "SMFIC_HELO";
    case Cmd::quit_nc: return "SMFIC_QUIT_NC";
    case Cmd::header: return "SMFIC_HEADER";
    case Cmd::mail: return "SMFIC_MAIL";
    case Cmd::eoh: return "SMFIC_EOH";
    case Cmd::optneg: return "SMFIC_OPTNEG";
    case Cmd::quit: return "SMFIC_QUIT";
    case Cmd::rcpt: return "SMFIC_RCPT";
    case Cmd::data: return "SMFIC_DATA";
    case Cmd::unknown: return "SMFIC_UNKNOWN";
    }
    return "SMFIC_?";
}

std::string name(char reply_code) {
    switch (static_cast<Act>(reply_code)) {
    case Act::addrcpt: return "SMFIR_ADDRCPT";
    case Act::delrcpt: return "SMFIR_DELRCPT";
    case Act::addrcpt_par: return "SMFIR_ADDRCPT_PAR";
    case Act::shutdown: return "SMFIR_SHUTDOWN";
    case Act::accept: return "SMFIR_ACCEPT";
    case Act::replbody: return "SMFIR_REPLBODY";
    case Act::cont: return "SMFIR_CONTINUE";
    case Act::discard: return "SMFIR_DISCARD";
    case Act::chgfrom: return "SMFIR_CHGFROM";
    case Act::conn_fail: return "SMFIR_CONN_FAIL";
    case Act::addheader: return "SMFIR_ADDHEADER";
    case Act::insheader: return "SMFIR_INSHEADER";
    case Act::setsymlist: return "SMFIR_SETSYMLIST";
    case Act::chgheader: return "SMFIR_CHGHEADER";
    case Act::progress: return "SMFIR_PROGRESS";
    case Act::quarantine: return "SMFIR_QUARANTINE";
    case Act::reject: return "SMFIR_REJECT";
    case Act::skip: return "SMFIR_SKIP";
    case Act::tempfail: return "SMFIR_TEMPFAIL";
    case Act::replycode: return "SMFIR_REPLYCODE";
    case Act::optneg: return "SMFIC_OPTNEG";
    }
    const auto c = static_cast<unsigned char>(reply_code);
    if (c > ' ' && c < 127) return std::string("unknown reply '") + reply_code + "'";
    return "unknown reply " + std::to_string(c);
}

std::optional<SocketSpec> parse_socket(std::string_view spec, std::string& error) {
    SocketSpec s;
    const auto colon = spec.find(':');
    const auto kind = spec.substr(0, colon == std::string_view::npos ? 0 : colon);
    const auto rest = colon == std::string_view::npos ? spec : spec.substr(colon + 1);
    if (kind == "unix" || kind == "local") {
        if (rest.empty() || rest.front() != '/') {
            error = "\"" + std::string(spec) + "\": unix: needs an absolute path";
            return std::nullopt;
        }
        s.is_unix = true;
        s.path = rest;
        return s;
    }
    if (kind != "inet") {
        error = "\"" + std::string(spec) + "\": expected inet:host:port or unix:/path";
        return std::nullopt;
    }
    std::string_view host, port;
    if (!rest.empty() && rest.front() == '[') {
        const auto close = rest.find(']');
        if (close == std::string_view::npos || rest.substr(close + 1, 1) != ":") {
            error = "\"" + std::string(spec) + "\": expected inet:[address]:port";
            return std::nullopt;
        }
        host = rest.substr(1, close - 1);
        port = rest.substr(close + 2);
    } else {
        const auto last = rest.rfind(':');
        if (last == std::string_view::npos) {
            error = "\"" + std::string(spec) + "\": no port (inet:host:port)";
            return std::nullopt;
        }
        host = rest.substr(0, last);
        port = rest.substr(last + 1);
    }
    unsigned p = 0;
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), p);
    if (host.empty() || ec != std::errc{} || end != port.data() + port.size() || p == 0 ||
        p > 65535) {
        error = "\"" + std::string(spec) + "\": bad host or port (inet:host:port)";
        return std::nullopt;
    }
    s.host = host;
    s.port = static_cast<std::uint16_t>(p);
    return s;
}

void put_optneg(std::string& out, std::uint32_t version, std::uint32_t actions,
                std::uint32_t steps) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::optneg));
    put_u32(out, version);
    put_u32(out, actions);
    put_u32(out, steps);
    end_packet(out, at);
}

std::size_t begin_macros(std::string& out, Cmd for_cmd) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::macro));
    out.push_back(static_cast<char>(for_cmd));
    return at;
}

void put_macro(std::string& out, std::string_view name, std::string_view value) {
    if (name.size() == 1 || name.starts_with('{')) {
        put_string(out, name);
    } else {
        out.push_back('{');
        out.append(name);
        put_string(out, "}");
    }
    put_string(out, value);
}

void end_macros(std::string& out, std::size_t at) {
    // Length field, command octet and the command the macros are for.
    if (out.size() == at + 6) {
        out.resize(at);
    } else {
        end_packet(out, at);
    }
}

void put_connect(std::string& out, std::string_view host, Family family, std::uint16_t port,
                 std::string_view addr) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::connect));
    put_string(out, host);
    out.push_back(static_cast<char>(family));
    if (family != Family::unknown) {
        out.push_back(static_cast<char>(port >> 8));
        out.push_back(static_cast<char>(port));
        put_string(out, addr);
    }
    end_packet(out, at);
}

void put_helo(std::string& out, std::string_view name) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::helo));
    put_string(out, name);
    end_packet(out, at);
}

static void put_args(std::string& out, Cmd c, std::span<const std::string> args) {
    const auto at = begin_packet(out, static_cast<char>(c));
    for (const auto& a : args) put_string(out, a);
    end_packet(out, at);
}

void put_mail(std::string& out, std::span<const std::string> args) {
    put_args(out, Cmd::mail, args);
}

void put_rcpt(std::string& out, std::span<const std::string> args) {
    put_args(out, Cmd::rcpt, args);
}

void put_header(std::string& out, std::string_view name, std::string_view value) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::header));
    put_string(out, name);
    for (std::size_t i = 0; i < value.size(); ++i)
        if (value[i] != '\r' || i + 1 == value.size() || value[i + 1] != '\n') out.push_back(value[i]);
    out.push_back('\0');
    end_packet(out, at);
}

void put_body(std::string& out, std::string_view bytes) {
    if (bytes.size() > chunk_size)
        smx::panic("milter body chunk of " + std::to_string(bytes.size()) + " octets");
    const auto at = begin_packet(out, static_cast<char>(Cmd::body));
    out.append(bytes);
    end_packet(out, at);
}

void put_unknown(std::string& out, std::string_view command_line) {
    const auto at = begin_packet(out, static_cast<char>(Cmd::unknown));
    put_string(out, command_line);
    end_packet(out, at);
}

void put_bare(std::string& out, Cmd c) {
    end_packet(out, begin_packet(out, static_cast<char>(c)));
}

Frame read_frame(const std::array<unsigned char, 4>& header, std::size_t max_packet) {
    Frame f;
    for (const auto b : header) f.length = (f.length << 8) | b;
    if (f.length == 0) {
        f.error = "bad packet length: 0";
    } else if (f.length > max_packet) {
        f.error = "unreasonable packet length: " + std::to_string(f.length) + " > " +
                  std::to_string(max_packet);
    }
    return f;
}

bool Negotiated::wants(Cmd c) const {
    const auto s = steps_of(c);
    if (s.no == 0) return true;
    if ((steps_of_version(version) & s.no) == 0) return false;  // not in its version
    return (steps & s.no) == 0;
}

bool Negotiated::no_reply(Cmd c) const {
    const auto s = steps_of(c);
    return s.nr != 0 && version >= 6 && (steps & s.nr) != 0;
}

std::string decode_optneg(std::string_view data, std::uint32_t our_version,
                          std::uint32_t our_actions, Negotiated& out) {
    Data d(data);
    out = Negotiated{};
    if (!d.u32(out.version) || !d.u32(out.actions) || !d.u32(out.steps))
        return "SMFIC_OPTNEG: packet too short";
    if (out.version < 2 || out.version > our_version)
        return "protocol version " + std::to_string(out.version) +
               " conflict with MTA protocol version " + std::to_string(our_version);
    if ((out.actions & our_actions) != out.actions)
        return "request mask " + std::to_string(out.actions) + " conflict with MTA request mask " +
               std::to_string(our_actions);
    while (!d.empty()) {
        std::uint32_t stage = 0;
        std::string list;
        if (!d.u32(stage) || !d.string(list)) return "SMFIC_OPTNEG: bad macro list";
        if (stage >= stage_count) continue;  // a stage we do not have: as postfix, ignored
        std::vector<std::string> names;
        std::size_t pos = 0;
        while (pos < list.size()) {
            const auto end = list.find_first_of(" ,", pos);
            const auto word = list.substr(pos, end == std::string::npos ? end : end - pos);
            if (!word.empty()) names.push_back(word);
            if (end == std::string::npos) break;
            pos = end + 1;
        }
        out.macros[stage] = std::move(names);
    }
    return {};
}

std::string decode_reply(char code, std::string_view data, Reply& out) {
    out = Reply{};
    out.act = static_cast<Act>(code);
    Data d(data);
    switch (out.act) {
    case Act::accept:
    case Act::cont:
    case Act::discard:
    case Act::reject:
    case Act::tempfail:
    case Act::skip:
    case Act::progress:
    case Act::shutdown:
    case Act::conn_fail:
        // libmilter sends none; postfix fails a reply with data it did not
        // expect, and so do we: the stream is out of step.
        if (!d.empty()) return name(code) + " followed by " + std::to_string(data.size()) +
                               " data octets";
        return {};
    case Act::replycode: {
        std::string text;
        if (!d.string(text) || !d.empty()) return name(code) + ": not one string";
        return decode_replycode(text, out);
    }
    case Act::quarantine:
        if (!d.string(out.text) || !d.empty()) return name(code) + ": not one string";
        return {};
    case Act::replbody:
        out.text.assign(data);
        return {};
    case Act::addheader:
        if (!d.string(out.name) || !d.string(out.value) || !d.empty()) return too_short(code);
        break;
    case Act::insheader:
    case Act::chgheader:
        if (!d.u32(out.index) || !d.string(out.name) || !d.string(out.value) || !d.empty())
            return too_short(code);
        break;
    case Act::addrcpt:
    case Act::delrcpt:
        if (!d.string(out.addr) || !d.empty()) return name(code) + ": not one string";
        return out.addr.empty() ? name(code) + ": empty address" : std::string();
    case Act::addrcpt_par:
    case Act::chgfrom:
        if (!d.string(out.addr)) return name(code) + ": no address";
        if (!d.empty() && !d.string(out.args)) return name(code) + ": arguments without NUL";
        if (!d.empty()) return name(code) + ": data after the arguments";
        return out.addr.empty() && out.act == Act::addrcpt_par ? name(code) + ": empty address"
                                                               : std::string();
    case Act::setsymlist:
    case Act::optneg:
    default:
        return "unexpected " + name(code);
    }
    if (out.name.empty()) return name(code) + ": empty header name";
    for (const char c : out.name)
        if (static_cast<unsigned char>(c) <= ' ' || c == ':' || c == 127)
            return name(code) + ": bad header name";
    return {};
}

bool is_final(Act a) {
    // ACCEPT CONTINUE DISCARD REJECT TEMPFAIL SKIP REPLYCODE SHUTDOWN CONN_FAIL
    return std::string_view("acdrtsy4f").find(static_cast<char>(a)) != std::string_view::npos;
}

} // namespace smx::milter
