// A real SMTPS server core on 127.0.0.1:<ephemeral> with a fake QMGR on a
// Unix socket (which counts per-client limits with QMGR's own anvil table),
// run on a background io thread, plus a blocking SMTP client.
#pragma once

#include "libsm/channel.hpp"
#include "libsm/config.hpp"
#include "libsm/messages.hpp"
#include "qmgr/anvil.hpp"
#include "smtps/content_writer.hpp"
#include "smtps/qmgr_client.hpp"
#include "smtps/server.hpp"

#include <boost/asio.hpp>
#include <atomic>
#include <filesystem>
#include <functional>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace smtps_test {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;

// How the fake QMGR answers TA_COMMIT.
enum class QmgrMode { ok, tempfail, reject, silent, hang_up };

class Harness {
public:
    explicit Harness(const std::function<void(smx::Config&)>& tweak = {});
    ~Harness();

    std::uint16_t port() const { return port_; }
    const smx::Config& cfg() const { return cfg_; }
    std::string content_path(const std::string& ta_id) const { return store_->path_for(ta_id); }
    // Files under the content directory, temporary ones included.
    std::vector<std::string> content_files() const;
    std::vector<smx::msg::TaCommit> commits();
    std::atomic<QmgrMode> mode{QmgrMode::ok};
    std::atomic<bool> qmgr_lost{false};

private:
    asio::awaitable<void> fake_qmgr();
    // An ANVIL_REQ, answered from anvil_ as QMGR does; false when malformed.
    bool answer_anvil(smx::Channel& ch, const smx::rec::Frame& f);
    asio::awaitable<void> start(std::promise<void>& ready);

    std::filesystem::path dir_;
    smx::Config cfg_;
    asio::io_context io_;
    asio::thread_pool pool_{2};
    std::unique_ptr<smx::smtps::ContentStore> store_;
    std::unique_ptr<asio::local::stream_protocol::acceptor> qmgr_acceptor_;
    std::unique_ptr<smx::smtps::QmgrClient> qmgr_;
    std::unique_ptr<smx::smtps::Server> server_;
    std::uint16_t port_ = 0;
    std::mutex mu_;
    std::vector<smx::msg::TaCommit> commits_;
    std::unique_ptr<smx::qmgr::Anvil> anvil_;
    std::thread thread_;
};

// Blocking SMTP client with a receive timeout so that a test never hangs.
class Client {
public:
    explicit Client(std::uint16_t port);
    ~Client();
    void send(const std::string& s);
    // One reply, all lines joined by "\n"; empty when the server closed.
    std::string reply();
    // Sends a command and returns its reply.
    std::string cmd(const std::string& line);
    // True when the server has closed the connection (EOF on read).
    bool closed();
    // Waits up to `ms` and returns whatever arrived.
    std::string drain(int ms);

private:
    std::string line();
    int fd_ = -1;
    std::string buf_;
};

// A full EHLO/MAIL/RCPT/DATA transaction; returns the reply to the final dot.
std::string send_message(Client& c, const std::string& from, const std::vector<std::string>& to,
                         const std::string& data_with_dot);
std::string read_file(const std::string& path);
// The queue id from "250 2.0.0 Ok: queued as ID".
std::string queued_id(const std::string& reply);

} // namespace smtps_test
