// IBDB record codec and the start-up reader: replays the log files in order,
// skips a torn tail, quarantines corrupt records and resyncs on the next
// valid one. Never throws on bad data: a broken log must not stop QMGR.
#include "qmgr/ibdb_record.hpp"
#include "qmgr/quarantine.hpp"

#include "libsm/crc32c.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <unistd.h>
#include <unordered_map>

namespace smx::qmgr::ibdb {
namespace {

namespace fs = std::filesystem;

void put_u32(std::string& out, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

std::uint32_t get_u32(std::string_view s, std::size_t off) {
    std::uint32_t v = 0;
    for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(s[off + i]);
    return v;
}

bool read_file(const std::string& path, std::string& out) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    char buf[1 << 16];
    for (;;) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            ::close(fd);
            return n == 0;
        }
        out.append(buf, static_cast<std::size_t>(n));
    }
}

// Where the next valid record starts after a bad one, or npos.
std::size_t resync(std::string_view data, std::size_t from) {
    std::string m;
    put_u32(m, magic);
    for (std::size_t pos = data.find(m, from); pos != std::string_view::npos;
         pos = data.find(m, pos + 1)) {
        Record r;
        if (parse_record(data, pos, r) == Parse::ok) return pos;
    }
    return std::string_view::npos;
}

class Replay {
public:
    Replay(const IbdbOptions& opt, LogContents& out) : opt_(opt), out_(out) {}

    void file(std::uint32_t num, bool last) {
        const std::string name = file_name(num);
        const std::string path = opt_.dir + "/" + name;
        std::string data;
        if (!read_file(path, data)) {
            spdlog::error("ibdb: cannot read {}: {}", path, std::strerror(errno));
            return;
        }
        std::size_t off = 0;
        while (off < data.size()) {
            Record r;
            Parse p = parse_record(data, off, r);
            if (p == Parse::ok) {
                apply(r, name, off);
                off += r.size;
                continue;
            }
            std::size_t next = resync(data, off + 1);
            if (next == std::string_view::npos) {
                tail(path, name, data, off, p, last);
                break;
            }
            quarantine(name, off, std::string_view(data).substr(off, next - off), "bad record");
            off = next;
        }
    }

    void finish() {
        for (auto& e : tas_) {
            if (!e.live) continue;
            const auto& ta = e.ta;
            bool any_deferred = false, all_final = true;
            for (std::size_t i = 0; i < ta.rcpt_done.size(); ++i) {
                any_deferred = any_deferred || ta.rcpt_deferred[i];
                all_final = all_final && (ta.rcpt_done[i] || ta.rcpt_deferred[i]);
            }
            // Every recipient done or deferred with some in DEFEDB: it has
            // left the IBDB. All done (crash before ta_done): QMGR finishes it.
            if (all_final && any_deferred) continue;
            out_.tas.emplace_back(e.file, std::move(e.ta));
        }
    }

private:
    struct Entry {
        std::uint32_t file = 0;
        RecoveredTa ta;
        bool live = true;
    };

    void apply(const Record& r, const std::string& name, std::size_t off) {
        std::string err;
        if (r.type == transaction) {
            auto env = smx::msg::envelope_from_bytes(r.payload, err);
            if (!env) {
                quarantine(name, off, record_bytes(r), "bad envelope: " + err);
                return;
            }
            if (index_.count(env->ta_id)) {
                spdlog::warn("ibdb: {}: duplicate transaction record in {} offset {}, ignored",
                             env->ta_id, name, off);
                return;
            }
            Entry e;
            e.file = file_number(name).value_or(0);
            e.ta.rcpt_done.assign(env->rcpts.size(), false);
            e.ta.rcpt_deferred.assign(env->rcpts.size(), false);
            e.ta.envelope = std::move(*env);
            index_.emplace(e.ta.envelope.ta_id, tas_.size());
            tas_.push_back(std::move(e));
            return;
        }
        auto ref = parse_ref(r.payload, r.type != ta_done);
        if (!ref) {
            quarantine(name, off, record_bytes(r), "bad completion record");
            return;
        }
        auto it = index_.find(ref->ta_id);
        if (it == index_.end()) return;  // its file is gone: it was finished
        Entry& e = tas_[it->second];
        if (r.type == ta_done) {
            e.live = false;
            index_.erase(it);
            return;
        }
        if (ref->idx >= e.ta.rcpt_done.size()) {
            spdlog::warn("ibdb: {}: recipient index {} out of range in {} offset {}, ignored",
                         ref->ta_id, ref->idx, name, off);
            return;
        }
        (r.type == rcpt_done ? e.ta.rcpt_done : e.ta.rcpt_deferred)[ref->idx] = true;
    }

    static std::string_view record_bytes(const Record& r) {
        return {r.payload.data() - header_size, r.size};
    }

    // The data from off to the end holds no valid record.
    void tail(const std::string& path, const std::string& name, std::string_view data,
              std::size_t off, Parse p, bool last) {
        std::string_view rest = data.substr(off);
        bool zeros = std::all_of(rest.begin(), rest.end(), [](char c) { return c == 0; });
        if (!(last && (p == Parse::incomplete || zeros)))
            quarantine(name, off, rest, "bad record at end of file");
        else
            spdlog::info("ibdb: {}: torn record at offset {} ({} bytes) skipped", name, off,
                         rest.size());
        // Appends go to a new file, but cut the tail off so that the next
        // start-up sees a clean file.
        if (last && ::truncate(path.c_str(), static_cast<off_t>(off)) != 0)
            spdlog::error("ibdb: truncate {} to {}: {}", path, off, std::strerror(errno));
    }

    void quarantine(const std::string& name, std::size_t off, std::string_view bytes,
                    const std::string& why) {
        ++out_.corrupt;
        const std::string qname = "ibdb-" + name + "-" + std::to_string(off);
        const std::string err = quarantine_write(opt_.quarantine_dir, qname, bytes);
        if (err.empty())
            spdlog::warn("ibdb: {} offset {}: {}, {} bytes quarantined to {}/{}", name, off, why,
                         bytes.size(), opt_.quarantine_dir, qname);
        else
            spdlog::error("ibdb: {} offset {}: {}, {} bytes skipped (quarantine {})", name, off,
                          why, bytes.size(), err);
    }

    const IbdbOptions& opt_;
    LogContents& out_;
    std::vector<Entry> tas_;
    std::unordered_map<std::string, std::size_t> index_;
};

} // namespace

void append_record(std::string& out, RecType type, std::string_view payload) {
    put_u32(out, magic);
    out.push_back(static_cast<char>(version));
    std::size_t crc_from = out.size();
    out.push_back(static_cast<char>(type));
    put_u32(out, static_cast<std::uint32_t>(payload.size()));
    std::uint32_t crc = smx::crc32c(std::string_view(out).substr(crc_from));
    crc = smx::crc32c(payload, crc);
    put_u32(out, crc);
    out.append(payload);
}

std::string ref_payload(std::string_view ta_id, std::optional<std::uint32_t> idx) {
    std::string p;
    p.push_back(static_cast<char>(std::min<std::size_t>(ta_id.size(), 255)));
    p.append(ta_id.substr(0, 255));
    if (idx) put_u32(p, *idx);
    return p;
}

std::optional<Ref> parse_ref(std::string_view p, bool with_idx) {
    if (p.empty()) return std::nullopt;
    std::size_t n = static_cast<unsigned char>(p[0]);
    if (p.size() != 1 + n + (with_idx ? 4 : 0)) return std::nullopt;
    Ref r{std::string(p.substr(1, n)), 0};
    if (with_idx) r.idx = get_u32(p, 1 + n);
    return r;
}

Parse parse_record(std::string_view data, std::size_t off, Record& r) {
    std::size_t avail = data.size() - off;
    if (avail < 4) return Parse::incomplete;
    if (get_u32(data, off) != magic) return Parse::bad;
    if (avail < header_size) return Parse::incomplete;
    auto type = static_cast<unsigned char>(data[off + 5]);
    if (static_cast<unsigned char>(data[off + 4]) != version || type < transaction || type > ta_done)
        return Parse::bad;
    std::uint32_t len = get_u32(data, off + 6);
    if (len > avail - header_size) return Parse::incomplete;
    // The CRC field sits between length and payload: checksum the two pieces.
    std::uint32_t crc = smx::crc32c(data.substr(off + header_size, len), smx::crc32c(data.substr(off + 5, 5)));
    if (crc != get_u32(data, off + 10)) return Parse::bad;
    r.type = static_cast<RecType>(type);
    r.payload = data.substr(off + header_size, len);
    r.size = header_size + len;
    return Parse::ok;
}

std::string file_name(std::uint32_t n) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08u.log", n);
    return buf;
}

std::optional<std::uint32_t> file_number(std::string_view name) {
    if (name.size() != 12 || name.substr(8) != ".log") return std::nullopt;
    std::uint32_t n = 0;
    for (char c : name.substr(0, 8)) {
        if (c < '0' || c > '9') return std::nullopt;
        n = n * 10 + static_cast<std::uint32_t>(c - '0');
    }
    return n;
}

LogContents read_log(const IbdbOptions& opt) {
    LogContents out;
    std::error_code ec;
    for (const auto& de : fs::directory_iterator(opt.dir, ec))
        if (auto n = file_number(de.path().filename().string()); n && de.is_regular_file(ec))
            out.files.push_back(*n);
    if (ec) spdlog::error("ibdb: cannot list {}: {}", opt.dir, ec.message());
    std::sort(out.files.begin(), out.files.end());
    Replay replay(opt, out);
    for (std::size_t i = 0; i < out.files.size(); ++i)
        replay.file(out.files[i], i + 1 == out.files.size());
    replay.finish();
    return out;
}

} // namespace smx::qmgr::ibdb
