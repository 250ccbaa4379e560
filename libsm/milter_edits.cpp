#include "libsm/milter_edits.hpp"

#include "libsm/address.hpp"

#include <algorithm>
#include <cctype>

namespace smx::milter {

namespace m = smx::milter;

namespace {

bool same_name(std::string_view field, std::string_view name) {
    if (field.size() <= name.size() || field[name.size()] != ':') return false;
    return std::equal(name.begin(), name.end(), field.begin(), [](char a, char b) {
        return std::tolower(static_cast<unsigned char>(a)) ==
               std::tolower(static_cast<unsigned char>(b));
    });
}

// Bare LFs (and a bare CR) as CRLF.
std::string crlf_lines(std::string_view s) {
    std::string out;
    out.reserve(s.size() + s.size() / 64);
    for (std::size_t i = 0; i < s.size(); ++i) {
        const char c = s[i];
        if (c == '\r') {
            out += "\r\n";
            if (i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else if (c == '\n') {
            out += "\r\n";
        } else {
            out += c;
        }
    }
    return out;
}

} // namespace

std::string header_field(std::string_view name, std::string_view value) {
    std::string f(name);
    f += ':';
    if (!value.empty() && value.front() != ' ' && value.front() != '\t') f += ' ';
    f += crlf_lines(value);
    f += "\r\n";
    return f;
}

void edit_headers(std::vector<std::string>& fields, const std::vector<m::Reply>& edits) {
    for (const auto& e : edits) {
        switch (e.act) {
        case m::Act::addheader: fields.push_back(header_field(e.name, e.value)); break;
        case m::Act::insheader: {
            const auto at = std::min<std::size_t>(e.index, fields.size());
            fields.insert(fields.begin() + static_cast<std::ptrdiff_t>(at),
                          header_field(e.name, e.value));
            break;
        }
        case m::Act::chgheader: {
            // sendmail counts from 1 and takes 0 as 1.
            std::uint32_t n = std::max<std::uint32_t>(e.index, 1);
            auto it = std::find_if(fields.begin(), fields.end(), [&](const std::string& f) {
                return same_name(f, e.name) && --n == 0;
            });
            if (it == fields.end()) {
                if (!e.value.empty()) fields.push_back(header_field(e.name, e.value));
            } else if (e.value.empty()) {
                fields.erase(it);
            } else {
                *it = header_field(e.name, e.value);
            }
            break;
        }
        default: break;
        }
    }
}

bool edits_content(const std::vector<m::Reply>& edits) {
    return std::any_of(edits.begin(), edits.end(), [](const m::Reply& e) {
        return e.act == m::Act::addheader || e.act == m::Act::insheader ||
               e.act == m::Act::chgheader || e.act == m::Act::replbody;
    });
}

std::optional<std::string> replaced_body(const std::vector<m::Reply>& edits) {
    std::optional<std::string> body;
    for (const auto& e : edits)
        if (e.act == m::Act::replbody) body = crlf_lines(e.text);
    return body;
}

std::string_view strip_brackets(std::string_view addr) {
    if (addr.size() >= 2 && addr.front() == '<' && addr.back() == '>')
        return addr.substr(1, addr.size() - 2);
    return addr;
}

smx::RewriteResult edit_envelope(Envelope& env, const std::vector<m::Reply>& edits,
                                 const smx::Rewriter& rewrite) {
    for (const auto& e : edits) {
        switch (e.act) {
        case m::Act::chgfrom: {
            env.sender = strip_brackets(e.addr);
            env.params = e.args;
            if (auto r = rewrite.sender(env.sender); !r.ok()) return r;
            break;
        }
        case m::Act::delrcpt: {
            const auto key = smx::address_key(strip_brackets(e.addr));
            std::erase_if(env.rcpts, [&](const smx::msg::Recipient& r) {
                return smx::address_key(r.addr) == key;
            });
            break;
        }
        case m::Act::addrcpt:
        case m::Act::addrcpt_par: {
            std::vector<smx::msg::Recipient> to;
            if (auto r = rewrite.recipient(strip_brackets(e.addr), e.args, to); !r.ok()) return r;
            for (auto& added : to) {
                const auto key = smx::address_key(added.addr);
                const bool have = std::any_of(env.rcpts.begin(), env.rcpts.end(), [&](const auto& r) {
                    return smx::address_key(r.addr) == key;
                });
                if (!have) env.rcpts.push_back(std::move(added));
            }
            break;
        }
        default: break;
        }
    }
    return {};
}

} // namespace smx::milter
