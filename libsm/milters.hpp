// The milters of one SMTP session (milter.smtpd_milters, or its listener's
// list): one connection to each for the session's life, asked in their
// order at each stage (docs/milter.md). A milter that fails (cannot be
// reached, times out, closes, breaks the protocol) is logged once and its
// default action stands for it from then on, as postfix does.
#pragma once

#include "libsm/config.hpp"
#include "libsm/messages.hpp"
#include "libsm/milter_conn.hpp"

#include <boost/asio.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::milter {

namespace asio = boost::asio;

// What the milters decided at a stage.
struct MilterVerdict {
    enum Kind { cont, reject, tempfail, discard };
    Kind kind = cont;
    // reject, tempfail: the SMTP reply, lines joined by CRLF.
    std::string reply;
    // A milter asked that the message be held (QUARANTINE, or a failed
    // milter whose default action is quarantine): why.
    std::string hold;
    // End of message: every milter's edits, in the milters' order.
    std::vector<milter::Reply> edits;
    bool refused() const { return kind == reject || kind == tempfail; }
};

// MAIL's and RCPT's arguments as the milters take them: the address in
// brackets, then each ESMTP parameter.
std::vector<std::string> command_args(std::string_view addr, std::string_view params);

// The stored content read from `at`: false when it cannot be read, an
// empty piece at its end.
using ContentRead = std::function<bool(std::uint64_t at, std::string& piece)>;

// The content's way through the milters (Milters::message).
struct MilterMessage {
    MilterVerdict verdict;
    std::vector<std::string> fields;  // the header fields as stored
    bool blank_line = false;          // the header ended at an empty line
    bool read_failed = false;         // errno says why
    bool ended = false;               // end of message sent: no abort needed
};

class Milters {
public:
    // failures: where each milter's failure is counted, by its default
    // action (for smx_milter_failures_total); it outlives the chain.
    Milters(asio::any_io_executor ex, const MilterConfig& cfg,
            const std::vector<MilterEntry>& list, milter::MacroLookup macros,
            smx::msg::MilterFailureCounts& failures);
    ~Milters();
    bool empty() const { return entries_.empty(); }

    // Connects to each milter and reports the client.
    asio::awaitable<MilterVerdict> connect(std::string_view host, milter::Family family,
                                           std::uint16_t port, std::string_view addr);
    asio::awaitable<MilterVerdict> helo(std::string_view name);
    asio::awaitable<MilterVerdict> mail(const std::vector<std::string>& args);
    asio::awaitable<MilterVerdict> rcpt(const std::vector<std::string>& args);
    asio::awaitable<MilterVerdict> data();
    // A command SMTPS does not know (refused anyway; the milter may choose
    // the reply).
    asio::awaitable<MilterVerdict> unknown(std::string_view line);
    // The content: each header field as stored ("Name: value\r\n" with its
    // folds), the end of the header, body bytes, the end of the message.
    asio::awaitable<MilterVerdict> header(std::string_view field);
    asio::awaitable<MilterVerdict> end_of_headers();
    asio::awaitable<MilterVerdict> body(std::string_view bytes);
    asio::awaitable<MilterVerdict> end_of_message(std::size_t max_body);
    // The content: header fields, end of header, body, end of message, as
    // read (at most max_body bytes of body for a REPLBODY); a hold asked at
    // any of these stages is in the verdict.
    asio::awaitable<MilterMessage> message(const ContentRead& read, std::size_t max_body);
    // The transaction ended without a message; the milters that accepted
    // the message are asked again for the next one.
    asio::awaitable<void> abort();
    asio::awaitable<void> quit();

private:
    struct Entry;
    // The one walk of the chain that every stage makes: each milter still
    // in the conversation asked (call(conn)), its answer folded into the
    // stage's verdict; the first refusal or discard ends the stage.
    template <class Call>
    asio::awaitable<MilterVerdict> ask(milter::Cmd stage, Call call);
    // One milter's answer r at a stage (or its default action, when it
    // failed now or before) folded into out: the stage's verdict when it
    // ends the stage, else nullopt (the next milter is asked).
    std::optional<MilterVerdict> fold(Entry& e, milter::Result& r, milter::Cmd stage,
                                      MilterVerdict& out);
    // e failed (logged once, counted): its default action stands for it
    // from now on.
    void fail(Entry& e, const milter::Result& r);

    std::vector<std::unique_ptr<Entry>> entries_;
    milter::MacroLookup macros_;
    smx::msg::MilterFailureCounts& failures_;
};

} // namespace smx::milter
