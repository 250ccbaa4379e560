// The message content split into header fields and body, as it arrives:
// the bytes ContentReader passes on (CRLF line ends, a line possibly in
// several pieces) in, whole header fields (with their folded lines and
// CRLFs), the end of the header and body bytes out. header_checks and the
// milters take header fields from here. Pure and incremental; it never
// changes or drops a byte: the fields, "\r\n" where the empty line was, and
// the body, put together, are the input.
//
// The header ends at the empty line, at the first line that is neither a
// field ("name:" with a printable name) nor a folded line, or when it
// passes max_header_size (postfix's header_size_limit): the field under way
// then goes on as body, unchecked but kept.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace smx {

class MessageParts {
public:
    explicit MessageParts(std::size_t max_header_size = 102400) : max_(max_header_size) {}

    // sink.header(std::string_view field), sink.end_of_headers(bool
    // blank_line) once, sink.body(std::string_view bytes).
    template <class Sink>
    void feed(std::string_view bytes, Sink& sink);
    // The end of the content: a field still held is passed on, and the
    // header ends if it has not.
    template <class Sink>
    void finish(Sink& sink);

    bool in_header() const { return state_ != State::body; }

private:
    enum class State { line_start, in_line, body };

    // The first bytes of a line decide what it is; false while they may
    // still be an empty line (a CR alone).
    template <class Sink>
    bool classify(std::string_view& bytes, Sink& sink);
    template <class Sink>
    void end_header(bool blank_line, Sink& sink);
    // What a line is, from its first bytes.
    enum class Kind { undecided, blank, folded, field, other };
    static Kind kind_of(std::string_view start);

    std::size_t max_;
    std::size_t header_size_ = 0;  // of the fields passed on and held
    State state_ = State::line_start;
    std::string field_;  // the field under way, its lines so far
    std::string line_;   // the start of a line not yet classified
};

template <class Sink>
void MessageParts::end_header(bool blank_line, Sink& sink) {
    if (!field_.empty()) sink.header(std::string_view(field_));
    field_.clear();
    field_.shrink_to_fit();
    sink.end_of_headers(blank_line);
    state_ = State::body;
}

inline MessageParts::Kind MessageParts::kind_of(std::string_view start) {
    if (start.empty()) return Kind::undecided;
    if (start.front() == ' ' || start.front() == '\t') return Kind::folded;
    if (start.front() == '\r') {
        if (start.size() == 1) return Kind::undecided;
        return start[1] == '\n' ? Kind::blank : Kind::other;
    }
    // RFC 5322 2.2: field-name is printable US-ASCII but ':'; at least one.
    for (std::size_t i = 0; i < start.size(); ++i) {
        const char c = start[i];
        if (c == ':') return i > 0 ? Kind::field : Kind::other;
        if (c <= ' ' || c >= 127) return Kind::other;
    }
    return Kind::undecided;
}

template <class Sink>
bool MessageParts::classify(std::string_view& bytes, Sink& sink) {
    Kind k = Kind::undecided;
    while (k == Kind::undecided && !bytes.empty()) {
        line_ += bytes.front();
        bytes.remove_prefix(1);
        k = kind_of(line_);
        if (k == Kind::undecided && header_size_ + line_.size() > max_) k = Kind::other;
    }
    if (k == Kind::undecided) return false;  // more bytes needed to tell
    if (k == Kind::blank) {
        line_.clear();
        end_header(true, sink);
        return true;
    }
    if (k == Kind::other || (k == Kind::folded && field_.empty()) ||
        header_size_ + line_.size() > max_) {
        // Not a header line (or over the limit): the header ends without
        // the empty line, and this line begins the body.
        end_header(false, sink);
        sink.body(std::string_view(line_));
        line_.clear();
        return true;
    }
    if (k == Kind::field && !field_.empty()) {
        sink.header(std::string_view(field_));
        field_.clear();
    }
    header_size_ += line_.size();
    field_ += line_;
    const bool ended = line_.back() == '\n';
    line_.clear();
    state_ = ended ? State::line_start : State::in_line;
    return true;
}

template <class Sink>
void MessageParts::feed(std::string_view bytes, Sink& sink) {
    while (!bytes.empty()) {
        switch (state_) {
        case State::body:
            sink.body(bytes);
            return;
        case State::line_start:
            if (!classify(bytes, sink)) return;
            break;
        case State::in_line: {
            const auto lf = bytes.find('\n');
            const std::string_view part = bytes.substr(0, lf == std::string_view::npos ? bytes.size() : lf + 1);
            if (header_size_ + part.size() > max_) {
                // The field under way goes on as body, with the rest.
                std::string held = std::move(field_);
                field_.clear();
                end_header(false, sink);
                sink.body(std::string_view(held));
                sink.body(bytes);
                return;
            }
            header_size_ += part.size();
            field_ += part;
            bytes.remove_prefix(part.size());
            if (lf != std::string_view::npos) state_ = State::line_start;
            break;
        }
        }
    }
}

template <class Sink>
void MessageParts::finish(Sink& sink) {
    if (state_ == State::body) return;
    const std::string rest = std::move(line_);
    line_.clear();
    end_header(false, sink);
    if (!rest.empty()) sink.body(std::string_view(rest));
}

} // namespace smx
