// The sendmail milter protocol, version 6 (sendmail's libmilter, postfix's
// smtpd_milters), as a pure codec: packets to send, replies read. No I/O:
// MilterConn (milter_conn.hpp) moves the bytes.
//
// On the wire every packet is a 4-octet length in network order (counting
// the command octet and the data), a command octet and its data: strings end
// in NUL, integers are 4 octets in network order, the port of CONNECT is 2.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace smx::milter {

// What the MTA sends (SMFIC_*).
enum class Cmd : char {
    abort = 'A', body = 'B', connect = 'C', macro = 'D', eob = 'E', helo = 'H',
    quit_nc = 'K', header = 'L', mail = 'M', eoh = 'N', optneg = 'O', quit = 'Q',
    rcpt = 'R', data = 'T', unknown = 'U',
};

// What a milter answers (SMFIR_*).
enum class Act : char {
    addrcpt = '+', delrcpt = '-', addrcpt_par = '2', shutdown = '4', accept = 'a',
    replbody = 'b', cont = 'c', discard = 'd', chgfrom = 'e', conn_fail = 'f',
    addheader = 'h', insheader = 'i', setsymlist = 'l', chgheader = 'm',
    progress = 'p', quarantine = 'q', reject = 'r', skip = 's', tempfail = 't',
    replycode = 'y', optneg = 'O',
};

// The actions a milter may ask for at end of message (SMFIF_*).
namespace action {
inline constexpr std::uint32_t add_headers = 0x01, change_body = 0x02, add_rcpt = 0x04,
                               delete_rcpt = 0x08, change_headers = 0x10, quarantine = 0x20,
                               change_from = 0x40, add_rcpt_args = 0x80, set_symlist = 0x100;
inline constexpr std::uint32_t all = 0x1ff;
} // namespace action

// Protocol steps (SMFIP_*): "no" = the milter does not want the stage,
// "nr" = it sends no reply to it.
namespace step {
inline constexpr std::uint32_t no_connect = 0x1, no_helo = 0x2, no_mail = 0x4, no_rcpt = 0x8,
                               no_body = 0x10, no_headers = 0x20, no_eoh = 0x40,
                               nr_header = 0x80, no_unknown = 0x100, no_data = 0x200,
                               skip = 0x400, rcpt_rej = 0x800, nr_connect = 0x1000,
                               nr_helo = 0x2000, nr_mail = 0x4000, nr_rcpt = 0x8000,
                               nr_data = 0x10000, nr_unknown = 0x20000, nr_eoh = 0x40000,
                               nr_body = 0x80000, header_leadspace = 0x100000;
// The steps each protocol version defines (a milter of an older version is
// sent only the events its version knows, as postfix does).
inline constexpr std::uint32_t v2 =
    no_connect | no_helo | no_mail | no_rcpt | no_body | no_headers | no_eoh;
inline constexpr std::uint32_t v3 = v2 | no_unknown;
inline constexpr std::uint32_t v4 = v3 | no_data;
inline constexpr std::uint32_t v6 = v4 | nr_header | skip | rcpt_rej | nr_connect | nr_helo |
                                    nr_mail | nr_rcpt | nr_data | nr_unknown | nr_eoh |
                                    nr_body | header_leadspace;
} // namespace step

// The stages a milter may name macros for in SETSYMLIST (SMFIM_*).
enum class Stage : std::uint32_t { connect = 0, helo = 1, mail = 2, rcpt = 3, data = 4, eom = 5,
                                   eoh = 6 };
inline constexpr std::size_t stage_count = 7;

inline constexpr std::uint32_t max_version = 6;
// A body packet carries at most this many octets (MILTER_CHUNK_SIZE).
inline constexpr std::size_t chunk_size = 65535;
// What a reply packet may hold (length field, so command octet included)
// unless the caller says otherwise: libmilter sends at most a chunk per
// packet; a bigger one is a broken or hostile milter.
inline constexpr std::size_t default_max_packet = 1 << 20;

// "SMFIC_MAIL", for logs.
std::string_view name(Cmd c);
// "SMFIR_REPLYCODE", or "unknown reply 'x'" style.
std::string name(char reply_code);

// "inet:host:port" (host a name, an IPv4 address, or an IPv6 address in
// brackets), "unix:/path" or "local:/path".
struct SocketSpec {
    bool is_unix = false;
    std::string host;      // inet
    std::uint16_t port = 0;
    std::string path;      // unix
};
// The spec, or nullopt with the reason in error.
std::optional<SocketSpec> parse_socket(std::string_view spec, std::string& error);

// ---- Encoding: each appends one whole packet to out. ----
void put_optneg(std::string& out, std::uint32_t version, std::uint32_t actions,
                std::uint32_t steps);
// The macros for the command `for_cmd` that follows, one at a time (no
// list to build per command): begin_macros, put_macro for each, then
// end_macros with what begin_macros returned; a packet that got no macro is
// taken back out. Names of one letter go as they are, longer ones in braces
// ("{client_addr}").
std::size_t begin_macros(std::string& out, Cmd for_cmd);
void put_macro(std::string& out, std::string_view name, std::string_view value);
void end_macros(std::string& out, std::size_t at);

// The client's address family in CONNECT (SMFIA_*).
enum class Family : char { unknown = 'U', unix_path = 'L', inet = '4', inet6 = '6' };
// host: the client's name, or "[addr]" when it has none (sendmail's form).
void put_connect(std::string& out, std::string_view host, Family family, std::uint16_t port,
                 std::string_view addr);
void put_helo(std::string& out, std::string_view name);
// args: "<addr>" first, then the ESMTP parameters ("SIZE=100").
void put_mail(std::string& out, std::span<const std::string> args);
void put_rcpt(std::string& out, std::span<const std::string> args);
// value as the milter asked (with or without the leading space), without
// its final line end; the lines of a folded field go joined by LF, as
// sendmail sends them (the CR of each CRLF is left out).
void put_header(std::string& out, std::string_view name, std::string_view value);
// At most chunk_size octets.
void put_body(std::string& out, std::string_view bytes);
void put_unknown(std::string& out, std::string_view command_line);
// DATA, EOH, EOB, ABORT, QUIT, QUIT_NC: no data.
void put_bare(std::string& out, Cmd c);

// ---- Framing ----
// The length field of a packet header; an error text for a length of 0 or
// over max_packet (the length counts the command octet).
struct Frame {
    std::uint32_t length = 0;  // command octet + data
    std::string error;         // empty: length is good
};
Frame read_frame(const std::array<unsigned char, 4>& header, std::size_t max_packet);

// ---- Option negotiation ----
struct Negotiated {
    std::uint32_t version = 0;
    std::uint32_t actions = 0;
    std::uint32_t steps = 0;
    // SETSYMLIST: the macros the milter wants per stage, replacing ours.
    std::array<std::optional<std::vector<std::string>>, stage_count> macros;
    // True when the milter receives this command (not masked by its steps
    // or its version).
    bool wants(Cmd c) const;
    // True when it sends no reply to this command.
    bool no_reply(Cmd c) const;
};
// Decodes the milter's OPTNEG reply data against what we offered; an error
// text when it is short, its version is out of 2..ours, or it asks for
// actions we did not offer.
std::string decode_optneg(std::string_view data, std::uint32_t our_version,
                          std::uint32_t our_actions, Negotiated& out);

// ---- Replies ----
struct Reply {
    Act act = Act::cont;
    // REPLYCODE: the code (4xx or 5xx) and the text of each line, after
    // "NNN " or "NNN-" (the enhanced code stays in the text).
    int code = 0;
    std::vector<std::string> lines;
    // QUARANTINE reason; REPLBODY bytes.
    std::string text;
    // Header edits: the field's name, value and index (INSHEADER: position
    // among all fields; CHGHEADER: the n-th field of that name, from 1; an
    // empty value deletes it).
    std::string name, value;
    std::uint32_t index = 0;
    // ADDRCPT, ADDRCPT_PAR, DELRCPT, CHGFROM: the address and ESMTP args.
    std::string addr, args;
};
// Decodes the data of one reply packet (command octet `code`); an error text
// when the reply is unknown or its data malformed (then `out` is
// unspecified). OPTNEG is decode_optneg's.
std::string decode_reply(char code, std::string_view data, Reply& out);

// True for a reply that ends the exchange of one command (as opposed to the
// end-of-message edits and PROGRESS, which come before the final one).
bool is_final(Act a);

} // namespace smx::milter
