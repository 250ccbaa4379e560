// Test messages for smx-source: deterministic content from the message
// index, so that a sink's -C files can be regenerated and compared byte for
// byte, and a body line that starts with '.' so dot-stuffing is exercised.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace smx::perf {

// "1K" (fixed), "100:1M" (log-uniform between the two, per message index)
// or "1K,4K,32K" (round robin).
class SizeSpec {
public:
    explicit SizeSpec(const std::string& spec);
    std::size_t size_for(std::size_t index) const;
    std::size_t max() const;

private:
    std::vector<std::size_t> list_;
    bool range_ = false;
};

struct Envelope {
    std::string sender;
    std::vector<std::string> recipients;
};

// Message `index`'s envelope: sender@FROM, u<index>.<j>@RCPT for each
// recipient j.
Envelope envelope_of(std::size_t index, const std::string& from_domain,
                     const std::string& rcpt_domain, long recipients);

// The message as it travels after DATA: headers and body, dot-stuffed,
// terminated by CRLF.CRLF. `size` counts the unstuffed bytes. Written into
// `m` (replacing what it held), so that a session reuses one buffer instead
// of a message-sized heap block per message.
void wire_message(std::size_t index, std::size_t size, const Envelope& env, std::string& m);
// The same message as the receiving MTA stores it (and shows it to its
// milters): not dot-stuffed, no terminating dot.
void plain_message(std::size_t index, std::size_t size, const Envelope& env, std::string& m);

} // namespace smx::perf
