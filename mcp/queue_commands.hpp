// The commands that talk to QMGR: stats, queue, qshape, show, requeue,
// flush, hold, release, delete. Each is one CTL request, except hold,
// release and delete with more ids than one request takes
// (smx::msg::max_ctl_ids) or ids on standard input, and show --body, which
// gets the content a page at a time.
#pragma once

#include "mcp/cli.hpp"

#include <istream>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

namespace smx::mcp {

// The commands above; in: where `-` reads queue ids from.
int ctl_command(const Args& args, std::istream& in, std::ostream& out, std::ostream& err);

// Queue ids, one a line, as `mailq | awk ... | tr -d '*!'` leaves them
// (postfix's marks * and ! after an id are taken off here too); blank lines
// are skipped. A line that is not an id (or over 256 bytes, never held
// whole) is reported to warn as "smx: COMMAND: line N: ..." and skipped.
class IdReader {
public:
    IdReader(std::istream& in, std::string command, std::ostream& warn)
        : in_(in), command_(std::move(command)), warn_(warn) {}
    // The next id; nullopt at the end of the input.
    std::optional<std::string> next();
    bool skipped() const { return skipped_; }

private:
    std::istream& in_;
    std::string command_;
    std::ostream& warn_;
    std::size_t line_ = 0;
    bool skipped_ = false;
};

// A page of content as stored (CRLF) with LF line ends; cr carries a CR
// that ended the previous page.
std::string to_lf(std::string_view page, bool& cr);

} // namespace smx::mcp
