// The end-of-message edits of milters applied to a message (pure: no I/O):
// header fields added, inserted, changed and deleted, the body replaced, the
// envelope's sender and recipients changed, as sendmail and postfix apply
// them (docs/milter.md, Edits).
#pragma once

#include "libsm/messages.hpp"
#include "libsm/milter_protocol.hpp"
#include "libsm/rewrite.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace smx::milter {

// The header fields as stored ("Name: value\r\n", folds included), edited
// in place by each header edit in order: ADDHEADER appends; INSHEADER
// inserts at its index among all fields (past the end: appends); CHGHEADER
// changes the index-th field of that name (from 1, the name in any case),
// an empty value deleting it, and appends when there is no such field.
void edit_headers(std::vector<std::string>& fields, const std::vector<milter::Reply>& edits);

// A milter's header value (folded lines joined by LF or CRLF) as a stored
// field: "Name: value\r\n" with CRLF line ends.
std::string header_field(std::string_view name, std::string_view value);

// Whether any edit changes the content (header fields or body).
bool edits_content(const std::vector<milter::Reply>& edits);

// The replacement body (REPLBODY), if any, with bare LFs made CRLF as
// stored content has them.
std::optional<std::string> replaced_body(const std::vector<milter::Reply>& edits);

// The envelope edits: CHGFROM sets sender and params; DELRCPT removes the
// recipients of that address (any case in the domain), ADDRCPT and
// ADDRCPT_PAR add the recipients it stands for (each once). Addresses come
// in angle brackets or not. As postfix's cleanup does for a milter's
// addresses, rewrite applies to them as to the envelope's own: the new
// sender through the sender's canonical maps, an added recipient through
// canonical maps and virtual alias expansion. A lookup that fails (or an
// alias loop) ends the edits with its result; env is then half edited.
struct Envelope {
    std::string sender;
    std::string params;
    std::vector<smx::msg::Recipient> rcpts;
};
smx::RewriteResult edit_envelope(Envelope& env, const std::vector<milter::Reply>& edits,
                                 const smx::Rewriter& rewrite);

// "<a@b>" or "a@b" as "a@b".
std::string_view strip_brackets(std::string_view addr);

} // namespace smx::milter
