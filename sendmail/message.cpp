#include "sendmail/message.hpp"

#include "libsm/domain.hpp"
#include "libsm/ids.hpp"

#include <cstdio>
#include <ctime>

namespace smx::sendmail {
namespace {

constexpr std::string_view crlf = "\r\n";

bool wsp(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
    while (!s.empty() && wsp(s.front())) s.remove_prefix(1);
    while (!s.empty() && wsp(s.back())) s.remove_suffix(1);
    return s;
}

// The field name of a header line ("Subject" of "Subject: hi"), or empty
// when the line is none: printable ASCII up to the colon.
std::string_view field_name(std::string_view line) {
    const auto colon = line.find(':');
    if (colon == 0 || colon == std::string_view::npos) return {};
    for (char c : line.substr(0, colon))
        if (c <= ' ' || c >= 127) return {};
    return line.substr(0, colon);
}

struct Field {
    std::string_view name;
    std::vector<std::string_view> lines;  // the first and its continuations
    // The value after the colon, unfolded.
    std::string value() const {
        std::string v(lines.front().substr(name.size() + 1));
        for (std::size_t i = 1; i < lines.size(); ++i) v += lines[i];
        return v;
    }
};

bool named(const Field& f, std::string_view name) { return smx::iequals(f.name, name); }

bool atext_or_space(char c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == ' ')
        return true;
    return std::string_view("!#$%&'*+-/=?^_`{|}~").find(c) != std::string_view::npos;
}

std::string message_id(const Local& l) {
    const std::time_t t = static_cast<std::time_t>(l.now_us / 1000000);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::snprintf(stamp, sizeof stamp, "%04d%02d%02d%02d%02d%02d", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    return "<" + std::string(stamp) + "." + l.random + "@" + l.hostname + ">";
}

} // namespace

void Collector::take(std::string_view kept, std::uint64_t length) {
    size_ += length + crlf.size();
    if (size_ <= max_size_) lines_.emplace_back(kept);
}

bool Collector::bytes(std::string_view b, bool ignore_dots) {
    auto end_line = [&] {
        if (!ignore_dots && partial_len_ == 1 && partial_ == ".") {
            ended_ = true;
            return true;
        }
        take(partial_, partial_len_);
        partial_.clear();
        partial_len_ = 0;
        return false;
    };
    for (char c : b) {
        if (ended_) return true;
        if (held_cr_) {
            held_cr_ = false;
            if (end_line()) return true;
            if (c == '\n') continue;
        }
        if (c == '\r') {
            held_cr_ = true;
        } else if (c == '\n') {
            if (end_line()) return true;
        } else {
            // A line that alone passes the size is counted, not kept.
            if (size_ + ++partial_len_ <= max_size_) partial_ += c;
        }
    }
    return ended_;
}

void Collector::end_of_input() {
    if (ended_) return;
    if (held_cr_ || partial_len_ > 0) {
        held_cr_ = false;
        take(partial_, partial_len_);
        partial_.clear();
        partial_len_ = 0;
    }
}

Prepared prepare(const std::vector<std::string>& lines, const Local& local, bool extract) {
    std::size_t i = 0;
    // An mbox separator ("From alice Tue Nov 24 ..."), as sendmail 8 drops it.
    if (!lines.empty() && lines.front().starts_with("From ")) i = 1;
    std::vector<Field> fields;
    for (; i < lines.size(); ++i) {
        const std::string_view l = lines[i];
        if (l.empty()) {
            ++i;
            break;
        }
        if (wsp(l.front()) && !fields.empty()) {
            fields.back().lines.push_back(l);
            continue;
        }
        const std::string_view name = field_name(l);
        if (name.empty()) break;  // the body, with no empty line before it
        fields.push_back({name, {l}});
    }
    Prepared out;
    if (extract) {
        const bool resent = std::any_of(fields.begin(), fields.end(), [](const Field& f) {
            return named(f, "Resent-To") || named(f, "Resent-Cc") || named(f, "Resent-Bcc");
        });
        const std::string prefix = resent ? "Resent-" : "";
        for (const Field& f : fields)
            if (named(f, prefix + "To") || named(f, prefix + "Cc") || named(f, prefix + "Bcc"))
                for (auto& a : address_list(f.value())) out.header_rcpts.push_back(std::move(a));
    }
    bool from = false, date = false, msgid = false;
    for (const Field& f : fields) {
        from = from || named(f, "From");
        date = date || named(f, "Date");
        msgid = msgid || named(f, "Message-ID");
        if (named(f, "Bcc") || named(f, "Resent-Bcc")) continue;
        for (std::string_view l : f.lines) {
            out.content += l;
            out.content += crlf;
        }
    }
    const std::string& who = local.sender.empty() ? local.login_address : local.sender;
    if (!from)
        out.content += "From: " +
                       (local.fullname.empty() ? who
                                               : display_name(local.fullname) + " <" + who + ">") +
                       "\r\n";
    if (!date) out.content += "Date: " + smx::rfc5322_date(local.now_us) + "\r\n";
    if (!msgid) out.content += "Message-ID: " + message_id(local) + "\r\n";
    out.content += crlf;
    for (; i < lines.size(); ++i) {
        out.content += lines[i];
        out.content += crlf;
    }
    return out;
}

std::vector<std::string> address_list(std::string_view v) {
    std::vector<std::string> out;
    std::string bare, angle;
    bool in_angle = false, has_angle = false, quoted = false;
    int comment = 0;
    auto emit = [&] {
        const std::string a(has_angle ? trim(angle) : trim(bare));
        if (!a.empty()) out.push_back(a);
        bare.clear();
        angle.clear();
        in_angle = has_angle = false;
    };
    for (std::size_t i = 0; i < v.size(); ++i) {
        const char c = v[i];
        std::string& to = in_angle ? angle : bare;
        if (comment > 0) {
            if (c == '\\') ++i;
            else if (c == '(') ++comment;
            else if (c == ')') --comment;
            continue;
        }
        if (quoted) {
            to += c;
            if (c == '\\' && i + 1 < v.size()) to += v[++i];
            else if (c == '"') quoted = false;
            continue;
        }
        switch (c) {
        case '"':
            quoted = true;
            to += c;
            break;
        case '(': comment = 1; break;
        case '<':
            in_angle = has_angle = true;
            angle.clear();
            break;
        case '>': in_angle = false; break;
        case ',':
        case ';':
            if (in_angle) to += c;
            else emit();
            break;
        case ':':
            // A group's name ("undisclosed-recipients:;"); in an angle address
            // the end of a source route.
            if (in_angle) angle.clear();
            else if (!has_angle) bare.clear();
            break;
        default:
            if (!(wsp(c) && !in_angle && has_angle)) to += c;
        }
    }
    emit();
    return out;
}

std::string display_name(std::string_view name) {
    std::string clean;
    for (char c : name) clean += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? ' ' : c;
    const std::string_view t = trim(clean);
    if (std::all_of(t.begin(), t.end(), atext_or_space)) return std::string(t);
    std::string q = "\"";
    for (char c : t) {
        if (c == '"' || c == '\\') q += '\\';
        q += c;
    }
    return q + "\"";
}

} // namespace smx::sendmail
