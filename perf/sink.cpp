// smx-sink: SMTP sink for benchmarks and tests. Accepts and discards, or
// with -C DIR writes every message (envelope + data) to a file; can refuse
// a deterministic share of recipients; reports when it has N messages.
#include "perf/common.hpp"
#include "perf/sink_session.hpp"

#include "libsm/await.hpp"
#include "libsm/panic.hpp"
#include "libsm/smtp_io.hpp"
#include "libsm/tls.hpp"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <stdexcept>

namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using namespace smx::perf;

const char* usage =
    "usage: smx-sink [--port P (0 = ephemeral)] [--bind ADDR] [-C DIR]\n"
    "                [--tempfail-rcpt PCT] [--permfail-rcpt PCT] [--no-pipelining]\n"
    "                [--expect N | --expect-rcpts N] [--hostname NAME] [--idle-timeout SEC]\n"
    "                [--control] [--tls-cert PEM --tls-key PEM]\n"
    "prints {\"event\":\"listening\",\"port\":P}, {\"event\":\"expected\",...} when N arrived\n"
    "(then exits), and a final stats line on exit or SIGTERM.\n"
    "--control: stay up and read commands on stdin, one per line: \"expect-rcpts N\"\n"
    "(report when N more recipients arrived), \"stats\"; EOF exits.\n"
    "--tls-cert/--tls-key: offer STARTTLS with that certificate (smx's server TLS policy).\n";

// A PEM file's bytes; throws naming it when it cannot be read.
std::string slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) throw std::runtime_error("cannot read " + path);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

SinkOptions parse(int argc, char** argv) {
    SinkOptions o;
    Args a(argc, argv);
    while (a.next()) {
        const std::string& k = a.opt();
        if (k == "--port" || k == "-p") o.port = static_cast<unsigned short>(a.number(0, 65535));
        else if (k == "--bind") o.bind = a.value();
        else if (k == "-C") o.capture_dir = a.value();
        else if (k == "--tempfail-rcpt") o.tempfail_pct = a.real(0, 100);
        else if (k == "--permfail-rcpt") o.permfail_pct = a.real(0, 100);
        else if (k == "--expect") o.expect = static_cast<std::uint64_t>(a.number(1, 1000000000));
        else if (k == "--expect-rcpts") o.expect_rcpts = static_cast<std::uint64_t>(a.number(1, 1000000000));
        else if (k == "--no-pipelining") o.pipelining = false;
        else if (k == "--control") o.control = true;
        else if (k == "--hostname") o.hostname = a.value();
        else if (k == "--tls-cert") o.tls_cert = a.value();
        else if (k == "--tls-key") o.tls_key = a.value();
        else if (k == "--idle-timeout") o.idle_timeout = std::chrono::milliseconds(static_cast<long>(a.real(0.001, 86400) * 1000));
        else throw std::invalid_argument("unknown option " + k);
    }
    if (o.tls_cert.empty() != o.tls_key.empty()) throw std::invalid_argument("--tls-cert needs --tls-key");
    if (o.tempfail_pct + o.permfail_pct > 100) throw std::invalid_argument("failure shares exceed 100%");
    return o;
}

std::string stats_line(const SinkStats& s, const char* event) {
    return std::string("{\"tool\":\"smx-sink\",\"event\":\"") + event + "\"" +
           ",\"msgs\":" + std::to_string(s.msgs) + ",\"rcpts\":" + std::to_string(s.rcpts) +
           ",\"rcpt_tempfail\":" + std::to_string(s.rcpt_tempfail) +
           ",\"rcpt_permfail\":" + std::to_string(s.rcpt_permfail) +
           ",\"sessions\":" + std::to_string(s.sessions) + ",\"bytes\":" + std::to_string(s.bytes) +
           ",\"tls_sessions\":" + std::to_string(s.tls_sessions) +
           ",\"t_first\":" + fixed(s.t_first, 4) + ",\"t_last\":" + fixed(s.t_last, 4) +
           ",\"t_now\":" + fixed(epoch_seconds(), 4) + ",\"errors\":" + json_counts(s.errors) + "}";
}

// One sink serves a whole benchmark suite: the harness arms it before each
// run instead of restarting it, so relays never see their cached
// connections to the sink vanish between runs.
asio::awaitable<void> control_loop(Sink& sink, std::function<void(const char*)> shutdown) {
    asio::posix::stream_descriptor in(co_await asio::this_coro::executor, ::dup(0));
    smx::smtp::LineReader<asio::posix::stream_descriptor> rd(in);
    for (;;) {
        const auto l = co_await rd.read_line(std::chrono::hours(24 * 365));
        if (l.status != smx::smtp::ReadStatus::ok) break;
        const std::string_view cmd = l.text;
        if (cmd.starts_with("expect-rcpts ")) {
            std::uint64_t n = 0;
            for (char c : cmd.substr(13)) n = c >= '0' && c <= '9' ? n * 10 + static_cast<std::uint64_t>(c - '0') : n;
            sink.expect_base = sink.stats.rcpts;
            sink.opt.expect_rcpts = n;
            if (n == 0) std::cout << stats_line(sink.stats, "expected") << std::endl;
        } else if (cmd == "stats") {
            std::cout << stats_line(sink.stats, "stats") << std::endl;
        } else {
            std::cout << "{\"event\":\"error\",\"text\":\"unknown command\"}" << std::endl;
        }
    }
    shutdown("stopped");
}

asio::awaitable<void> accept_loop(Sink& sink, tcp::acceptor& acc) {
    for (;;) {
        auto [ec, sock] = co_await acc.async_accept(smx::await_tuple);
        if (ec == asio::error::operation_aborted) co_return;
        if (ec) {
            // EMFILE and friends: count, breathe, keep serving the others.
            ++sink.stats.errors["accept"];
            asio::steady_timer pause(co_await asio::this_coro::executor, std::chrono::milliseconds(50));
            co_await pause.async_wait(smx::await_tuple);
            continue;
        }
        asio::co_spawn(acc.get_executor(), serve(sink, std::move(sock)),
                       smx::crash_on_exception("smx-sink session"));
    }
}

} // namespace

int main(int argc, char** argv) {
    Sink sink;
    try {
        sink.opt = parse(argc, argv);
    } catch (const std::exception& e) {
        std::cerr << "smx-sink: " << e.what() << "\n" << usage;
        return 2;
    }
    if (!sink.opt.tls_cert.empty()) {
        try {
            smx::ServerConfig tls;
            tls.tls_cert = sink.opt.tls_cert;
            tls.tls_key = sink.opt.tls_key;
            // libsm builds contexts from bytes only (smx run reads the files
            // for its children); a test tool reads its own.
            smx::Secrets pem;
            pem.set(smx::Secret::tls_cert, slurp(tls.tls_cert));
            pem.set(smx::Secret::tls_key, slurp(tls.tls_key));
            sink.tls = smx::tls::server_context(tls, pem);
        } catch (const std::exception& e) {
            std::cerr << "smx-sink: " << e.what() << "\n";
            return 2;
        }
    }
    raise_fd_limit();
    asio::io_context ctx(1);
    tcp::acceptor acc(ctx);
    try {
        const tcp::endpoint ep(asio::ip::make_address(sink.opt.bind), sink.opt.port);
        acc.open(ep.protocol());
        acc.set_option(tcp::acceptor::reuse_address(true));
        acc.bind(ep);
        acc.listen(asio::socket_base::max_listen_connections);
    } catch (const std::exception& e) {
        std::cerr << "smx-sink: cannot listen on " << sink.opt.bind << ":" << sink.opt.port
                  << ": " << e.what() << "\n";
        return 1;
    }
    std::cout << "{\"event\":\"listening\",\"port\":" << acc.local_endpoint().port() << "}"
              << std::endl;
    bool stopping = false;
    auto shutdown = [&](const char* event) {
        if (stopping) return;
        stopping = true;
        std::cout << stats_line(sink.stats, event) << std::endl;
        ctx.stop();
    };
    sink.on_message = [&] {
        const auto& s = sink.stats;
        const bool met = (sink.opt.expect && s.msgs >= sink.opt.expect) ||
                         (sink.opt.expect_rcpts && s.rcpts - sink.expect_base >= sink.opt.expect_rcpts);
        if (!met) return;
        if (!sink.opt.control) {
            shutdown("expected");
            return;
        }
        std::cout << stats_line(s, "expected") << std::endl;
        sink.opt.expect = sink.opt.expect_rcpts = 0;
    };
    asio::signal_set signals(ctx, SIGTERM, SIGINT);
    signals.async_wait([&](boost::system::error_code ec, int) {
        if (!ec) shutdown("stopped");
    });
    asio::co_spawn(ctx, accept_loop(sink, acc), smx::crash_on_exception("smx-sink accept loop"));
    if (sink.opt.control)
        asio::co_spawn(ctx, control_loop(sink, shutdown), smx::crash_on_exception("smx-sink control"));
    smx::run_or_panic(ctx, "smx-sink");
    return 0;
}
