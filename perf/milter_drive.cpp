// smx-milter-drive: drives one milter directly, as an MTA would, at full
// speed: the ceiling of the milter alone (relay-bench --milter's "dkim alone
// (driver)"). Many concurrent milter connections on one io_context through
// libsm's milter client (smx::milter::Conn, what SMTPS uses), each one
// SMTP session's worth of events: connect, HELO, then per message MAIL,
// RCPT, DATA, the header fields, end of header, the body and end of
// message. The messages are smx-source's (perf/message.cpp) as a relay
// stores them, after a Received: header of its own. Every reply is checked;
// a run with any failure exits 1. Prints one JSON line at the end: msgs/s
// and the driver's own CPU per message (getrusage).
#include "perf/common.hpp"
#include "perf/message.hpp"

#include "libsm/ids.hpp"
#include "libsm/message_parts.hpp"
#include "libsm/milter_conn.hpp"
#include "libsm/panic.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace {

namespace asio = boost::asio;
namespace m = smx::milter;
using namespace smx::perf;

const char* usage =
    "usage: smx-milter-drive --milter inet:HOST:PORT|unix:/PATH [-s connections] [-n messages]\n"
    "                        [-m msgs-per-connection (0 = unlimited)] [-S size]\n"
    "                        [--expect-header NAME] [--from-domain D] [--rcpt-domain D]\n"
    "                        [--timeout SEC]\n"
    "--expect-header: every end of message must add (or insert) this header field\n"
    "(DKIM-Signature for OpenDKIM); else CONTINUE or ACCEPT there is success.\n";

struct Options {
    std::string milter;
    long sessions = 100;
    std::size_t messages = 1000;
    long per_connection = 1;  // as relay-bench's smx-source: one message per SMTP session
    std::string size = "1K";
    std::string expect_header;
    std::string from_domain = "source.example";
    std::string rcpt_domain = "sink.example";
    std::chrono::steady_clock::duration timeout = std::chrono::seconds(60);
};

const std::string relay_name = "relay.perf.example";
const std::string client_helo = "smx-source.example";
const std::string client_addr = "127.0.0.1";
const std::uint16_t client_port = 40000;

double cpu_seconds() {
    rusage ru{};
    getrusage(RUSAGE_SELF, &ru);
    const auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
    return secs(ru.ru_utime) + secs(ru.ru_stime);
}

bool iequal(std::string_view a, std::string_view b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](char x, char y) {
        return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
    });
}

// The shared state of one run: which message is next and the outcomes.
class Drive {
public:
    explicit Drive(const Options& o) : opt(o), sizes(o.size) {}

    const Options opt;
    const SizeSpec sizes;

    bool take(std::size_t& idx) {
        if (next_ >= opt.messages) return false;
        idx = next_++;
        return true;
    }
    void connected() { ++connections_; }
    void ok() { ++ok_; }
    // what: the stage and the reply ("mail_SMFIR_REJECT"); detail: the
    // client's account of an error, the first one kept for the report.
    void fail(const std::string& what, const std::string& detail = {}) {
        ++failed_;
        ++errors_[what];
        if (first_error_.empty()) first_error_ = detail;
    }
    bool all_ok() const { return ok_ == opt.messages; }

    std::string report(double seconds, double cpu) const {
        const double n = static_cast<double>(ok_ + failed_);
        std::string o = "{\"tool\":\"smx-milter-drive\",\"milter\":\"" + json_escape(opt.milter) + "\"";
        o += ",\"sessions\":" + std::to_string(opt.sessions);
        o += ",\"per_connection\":" + std::to_string(opt.per_connection);
        o += ",\"msgs\":" + std::to_string(ok_) + ",\"failed\":" + std::to_string(failed_);
        o += ",\"connections\":" + std::to_string(connections_);
        o += ",\"t_start\":" + fixed(start_epoch_, 6) + ",\"seconds\":" + fixed(seconds, 6);
        o += ",\"msgs_per_s\":" + fixed(seconds > 0 ? static_cast<double>(ok_) / seconds : 0, 1);
        o += ",\"cpu_s\":" + fixed(cpu, 6);
        o += ",\"cpu_ms_per_msg\":" + fixed(n > 0 ? cpu / n * 1000 : 0, 4);
        o += ",\"errors\":" + json_counts(errors_);
        if (!first_error_.empty()) o += ",\"first_error\":\"" + json_escape(first_error_) + "\"";
        return o + "}";
    }

private:
    std::size_t next_ = 0;
    std::uint64_t ok_ = 0, failed_ = 0, connections_ = 0;
    std::map<std::string, std::uint64_t> errors_;
    std::string first_error_;
    const double start_epoch_ = epoch_seconds();
};

// The macros of the message under way, as SMTPS gives them (smtps/session.cpp).
struct Macros {
    std::string qid, sender, rcpt;
    std::optional<std::string> operator()(std::string_view name) const {
        if (name == "j" || name == "daemon_name") return relay_name;
        if (name == "v") return std::string("smx");
        if (name == "_") return "localhost [" + client_addr + "]";
        if (name == "client_addr" || name == "daemon_addr" || name == "if_addr") return client_addr;
        if (name == "client_name" || name == "client_ptr") return std::string("localhost");
        if (name == "i" && !qid.empty()) return qid;
        if (name == "mail_addr" && !sender.empty()) return sender;
        if (name == "rcpt_addr" && !rcpt.empty()) return rcpt;
        return std::nullopt;
    }
};

// What MessageParts passes on.
struct Parts {
    std::vector<std::string> fields;
    std::string bytes;  // the body
    void header(std::string_view f) { fields.emplace_back(f); }
    void end_of_headers(bool) {}
    void body(std::string_view b) { bytes.append(b); }
};

// A reply before end of message that lets the message go on.
bool continues(const m::Result& r) { return r.status == m::Result::ok && r.reply.act == m::Act::cont; }

std::string failure(std::string_view stage, const m::Result& r) {
    if (r.status != m::Result::ok) return std::string(stage) + (r.status == m::Result::dead ? "_dead" : "_error");
    return std::string(stage) + "_" + m::name(static_cast<char>(r.reply.act));
}

// GCC 12 warns falsely that this coroutine's frame is freed with a
// mismatched operator delete (GCC PR 109224, fixed in GCC 13; as
// perf/sink_session.cpp); Boost.Asio allocates and frees the frame itself.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
// One message on an open connection; false when the connection is no
// longer usable.
// mac: the values `macros` gives.
asio::awaitable<bool> transaction(Drive& run, m::Conn& c, Macros& mac, const m::MacroLookup& macros,
                                  std::size_t idx, std::string& text) {
    const Envelope env = envelope_of(idx, run.opt.from_domain, run.opt.rcpt_domain, 1);
    mac.qid = "Q" + std::to_string(idx);
    mac.sender = env.sender;
    mac.rcpt = env.recipients[0];
    // The relay's Received: first, as SMTPS stores the message.
    text = "Received: from " + client_helo + " (localhost [" + client_addr + "])\r\n\tby " + relay_name +
           " (smx) with ESMTP id " + mac.qid + "\r\n\tfor <" + mac.rcpt + ">; " +
           smx::rfc5322_date(smx::now_us()) + "\r\n";
    std::string msg;
    plain_message(idx, run.sizes.size_for(idx), env, msg);
    text += msg;
    Parts parts;
    smx::MessageParts split;
    split.feed(text, parts);
    split.finish(parts);

    const std::vector<std::string> mail{"<" + env.sender + ">"}, rcpt{"<" + mac.rcpt + ">"};
    m::Result r = co_await c.mail(macros, mail);
    std::string_view stage = "mail";
    if (continues(r)) {
        stage = "rcpt";
        r = co_await c.rcpt(macros, rcpt);
    }
    if (continues(r)) {
        stage = "data";
        r = co_await c.data(macros);
    }
    for (std::size_t i = 0; i < parts.fields.size() && continues(r); ++i) {
        stage = "header";
        const std::string_view f = parts.fields[i];
        const auto colon = f.find(':');
        r = co_await c.header(macros, f.substr(0, colon), f.substr(colon + 1));
    }
    if (continues(r)) {
        stage = "eoh";
        r = co_await c.eoh(macros);
    }
    if (continues(r)) {
        stage = "body";
        r = co_await c.body(macros, parts.bytes);
    }
    if (!continues(r)) {
        run.fail(failure(stage, r), r.what);
        if (r.status != m::Result::ok) co_return false;
        co_return (co_await c.abort()).status == m::Result::ok;
    }
    r = co_await c.eom(macros, 1 << 20);
    if (r.status != m::Result::ok || (r.reply.act != m::Act::cont && r.reply.act != m::Act::accept)) {
        run.fail(failure("eom", r), r.what);
        co_return r.status == m::Result::ok;
    }
    const bool signed_ = run.opt.expect_header.empty() ||
                         std::any_of(r.edits.begin(), r.edits.end(), [&](const m::Reply& e) {
                             return (e.act == m::Act::addheader || e.act == m::Act::insheader) &&
                                    iequal(e.name, run.opt.expect_header);
                         });
    if (signed_) run.ok();
    else run.fail("eom_without_" + run.opt.expect_header);
    co_return true;
}
#pragma GCC diagnostic pop

asio::awaitable<void> session(Drive& run, m::ConnSettings settings) {
    const auto ex = co_await asio::this_coro::executor;
    std::size_t idx = 0;
    std::string text;
    // A message is claimed before connecting, as smx-source does: no
    // connection opens with nothing to send.
    bool have = run.take(idx);
    while (have) {
        m::Conn c(ex, settings);
        Macros mac;
        // One std::function for the connection, not one (copying mac) per call.
        const m::MacroLookup macros = [&mac](std::string_view name) { return mac(name); };
        m::Result r = co_await c.open();
        std::string_view stage = "open";
        if (r.status == m::Result::ok) {
            stage = "connect";
            r = co_await c.connect(macros, "localhost", m::Family::inet, client_port, client_addr);
        }
        if (continues(r)) {
            stage = "helo";
            r = co_await c.helo(macros, client_helo);
        }
        if (!continues(r)) {
            // The message it was for fails with it.
            run.fail(failure(stage, r), r.what);
            have = run.take(idx);
            continue;
        }
        run.connected();
        bool alive = true;
        const long limit = run.opt.per_connection;
        for (long sent = 0; alive && have && (limit == 0 || sent < limit); ++sent) {
            alive = co_await transaction(run, c, mac, macros, idx, text);
            have = run.take(idx);
        }
        if (alive) co_await c.quit();
    }
}

Options parse(int argc, char** argv) {
    Options o;
    Args a(argc, argv);
    while (a.next()) {
        const std::string& k = a.opt();
        if (k == "--milter") o.milter = a.value();
        else if (k == "-s") o.sessions = a.number(1, 100000);
        else if (k == "-n") o.messages = static_cast<std::size_t>(a.number(1, 100000000));
        else if (k == "-m") o.per_connection = a.number(0, 100000000);
        else if (k == "-S") o.size = a.value();
        else if (k == "--expect-header") o.expect_header = a.value();
        else if (k == "--from-domain") o.from_domain = a.value();
        else if (k == "--rcpt-domain") o.rcpt_domain = a.value();
        else if (k == "--timeout") o.timeout = std::chrono::milliseconds(static_cast<long>(a.real(0.001, 86400) * 1000));
        else throw std::invalid_argument("unknown option " + k);
    }
    if (o.milter.empty()) throw std::invalid_argument("--milter is required");
    return o;
}

} // namespace

int main(int argc, char** argv) {
    Options opt;
    m::ConnSettings settings;
    try {
        opt = parse(argc, argv);
        SizeSpec check(opt.size);
        std::string err;
        auto where = m::parse_socket(opt.milter, err);
        if (!where) throw std::invalid_argument(opt.milter + ": " + err);
        settings.socket = opt.milter;
        settings.where = std::move(*where);
        settings.connect_timeout = settings.command_timeout = settings.content_timeout = opt.timeout;
    } catch (const std::exception& e) {
        std::cerr << "smx-milter-drive: " << e.what() << "\n" << usage;
        return 2;
    }
    raise_fd_limit();
    asio::io_context ctx(1);
    Drive run(opt);
    const double cpu0 = cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    for (long i = 0; i < opt.sessions; ++i)
        asio::co_spawn(ctx, session(run, settings), smx::crash_on_exception("smx-milter-drive session"));
    smx::run_or_panic(ctx, "smx-milter-drive");
    const std::chrono::duration<double> secs = std::chrono::steady_clock::now() - t0;
    std::cout << run.report(secs.count(), cpu_seconds() - cpu0) << std::endl;
    return run.all_ok() ? 0 : 1;
}
