// The milter reply decoder (SMTPS's and smx-pickup's view of a milter): the
// input is a stream of packets as a milter sends them, the first one the
// OPTNEG answer. Oracle: no crash, and what is decoded keeps to the
// protocol's rules (reply codes 4XX/5XX with at least one line, header names
// without separators, addresses present where required).
#include "libsm/milter_protocol.hpp"

#include <array>
#include <cstdlib>
#include <string_view>

namespace m = smx::milter;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::string_view in(reinterpret_cast<const char*>(data), size);
    bool first = true;
    while (in.size() >= 4) {
        std::array<unsigned char, 4> h;
        for (int i = 0; i < 4; ++i) h[i] = static_cast<unsigned char>(in[i]);
        const auto f = m::read_frame(h, 4096);
        if (!f.error.empty()) {
            if (f.length != 0 && f.length <= 4096) std::abort();
            break;
        }
        in.remove_prefix(4);
        if (in.size() < f.length) break;
        const char code = in[0];
        const auto body = in.substr(1, f.length - 1);
        in.remove_prefix(f.length);
        if (first) {
            first = false;
            m::Negotiated n;
            if (m::decode_optneg(body, m::max_version, m::action::all, n).empty()) {
                if (n.version < 2 || n.version > m::max_version) std::abort();
                if ((n.actions & ~m::action::all) != 0) std::abort();
                (void)n.wants(m::Cmd::data);
                (void)n.no_reply(m::Cmd::rcpt);
            }
            continue;
        }
        m::Reply r;
        if (!m::decode_reply(code, body, r).empty()) continue;
        (void)m::is_final(r.act);
        switch (r.act) {
        case m::Act::replycode:
            if (r.code < 400 || r.code > 559 || r.lines.empty()) std::abort();
            break;
        case m::Act::addheader:
        case m::Act::insheader:
        case m::Act::chgheader:
            if (r.name.empty() || r.name.find_first_of(": \r\n") != std::string::npos)
                std::abort();
            break;
        case m::Act::addrcpt:
        case m::Act::addrcpt_par:
        case m::Act::delrcpt:
            if (r.addr.empty()) std::abort();
            break;
        default:
            break;
        }
    }
    return 0;
}
