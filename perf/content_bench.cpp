// smx-content-bench: what a content store costs per message on this file
// system, outside the relay. It plays the content's whole life in one
// thread, batch by batch: write each message of a batch, make the batch
// durable with one sync, read each message back, remove it. Two designs:
//
//   files    one file per message through smx's own libsm/content_file.hpp
//            (cdb/XX/<id>, created as SMTPS creates them), one
//            syncfs per batch (content_sync = "batch"), open+read, unlink;
//   segment  messages appended to a segment file, one fdatasync per batch,
//            pread by offset, a segment unlinked once all of it is read.
//
// CPU is counted machine-wide from /proc/stat (the kernel's writeback and
// journal threads work for us too) and for this process (getrusage), per
// message. Run it on the file system of the spool, on a quiet machine,
// with both designs in one run: docs/benchmarks.md.
#include "libsm/content_file.hpp"
#include "libsm/ids.hpp"
#include "perf/common.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using namespace smx::perf;

namespace {

[[noreturn]] void die(const std::string& what) {
    std::perror(what.c_str());
    std::exit(1);
}

// Busy and total jiffies of all CPUs.
std::pair<double, double> cpu_jiffies() {
    std::ifstream f("/proc/stat");
    std::string cpu;
    double user, nice, sys, idle, iowait, irq, softirq, steal;
    f >> cpu >> user >> nice >> sys >> idle >> iowait >> irq >> softirq >> steal;
    const double busy = user + nice + sys + irq + softirq + steal;
    return {busy, busy + idle + iowait};
}

double process_cpu_seconds() {
    rusage r{};
    ::getrusage(RUSAGE_SELF, &r);
    return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) +
           static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

void write_all(int fd, const std::string& data) {
    if (const int err = smx::content::write_all(fd, data)) {
        errno = err;
        die("write");
    }
}

struct Options {
    std::string design = "files";
    fs::path dir;
    long msgs = 20000;
    std::size_t size = 1024;
    long batch = 25;
    std::size_t segment_bytes = 16u << 20;
};

// smx's own content files (libsm/content_file.hpp), under ids of smx's form.
class FileStore {
public:
    explicit FileStore(const fs::path& dir) : dir_((dir / "cdb").string()) {
        fs::create_directories(dir_);
        dirfd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd_ < 0) die("open cdb");
    }
    ~FileStore() { ::close(dirfd_); }
    void write(long id, const std::string& data) {
        const std::string path = smx::content::file_path(dir_, ta_id(id), true);
        int fd = -1;
        int err = smx::content::create(path, fd);
        if (!err) err = smx::content::write_all(fd, data);
        // No sync here: the batch's syncfs makes it durable, as in smx.
        check(smx::content::close_created(fd, err, path, false), "create");
    }
    void sync() {
        if (::syncfs(dirfd_) != 0) die("syncfs");
    }
    void read(long id, std::string& buf) {
        // Checked as every reader in smx checks content (its cost measured too).
        int fd = -1;
        std::uint64_t size = 0;
        std::string why;
        check(smx::content::open_read(dir_, ta_id(id), true,
                                     smx::content::message_file(writers_, buf.size()), fd, size, why),
              "open");
        if (::read(fd, buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) die("read");
        ::close(fd);
    }
    void remove(long id) { check(smx::content::remove(dir_, ta_id(id), true), "unlink"); }

private:
    static std::string ta_id(long id) {
        char s[18];
        std::snprintf(s, sizeof s, "%017lX", id);
        return s;
    }
    static void check(int err, const char* what) {
        if (err == 0) return;
        errno = err;
        die(what);
    }
    std::string dir_;
    int dirfd_ = -1;
    const smx::content::Writers writers_ = smx::content::writers_from_env();
};

class SegmentStore {
public:
    SegmentStore(const fs::path& dir, std::size_t segment_bytes)
        : dir_(dir / "segments"), max_(segment_bytes) {
        fs::create_directories(dir_);
        dirfd_ = ::open(dir_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (dirfd_ < 0) die("open segments");
    }
    ~SegmentStore() {
        for (auto& s : segs_)
            if (s.fd >= 0) ::close(s.fd);
        ::close(dirfd_);
    }
    void write(long id, const std::string& data) {
        if (segs_.empty() || segs_.back().size + data.size() > max_) open_segment();
        Segment& s = segs_.back();
        write_all(s.fd, data);
        where_.resize(static_cast<std::size_t>(id) + 1);
        where_[static_cast<std::size_t>(id)] = {segs_.size() - 1, s.size};
        s.size += data.size();
        ++s.live;
    }
    // Syncs every segment written since the last sync (one, but for a
    // batch that crossed into a new segment), and a new one's directory.
    void sync() {
        for (std::size_t i = synced_; i < segs_.size(); ++i)
            if (segs_[i].fd >= 0 && ::fdatasync(segs_[i].fd) != 0) die("fdatasync");
        if (new_file_ && ::fsync(dirfd_) != 0) die("fsync dir");
        new_file_ = false;
        synced_ = segs_.size() - 1;
    }
    void read(long id, std::string& buf) {
        const auto [seg, off] = where_[static_cast<std::size_t>(id)];
        if (::pread(segs_[seg].fd, buf.data(), buf.size(), static_cast<off_t>(off)) !=
            static_cast<ssize_t>(buf.size()))
            die("pread");
    }
    void remove(long id) {
        const std::size_t seg = where_[static_cast<std::size_t>(id)].first;
        --segs_[seg].live;
        if (seg + 1 < segs_.size()) drop_if_done(seg);
    }

private:
    struct Segment {
        int fd = -1;
        std::size_t size = 0;
        long live = 0;
    };
    static std::string name(std::size_t seg) { return "S" + std::to_string(seg); }
    // A segment goes when nothing in it is live and nothing more is appended.
    void drop_if_done(std::size_t seg) {
        Segment& s = segs_[seg];
        if (s.live != 0 || s.fd < 0) return;
        ::close(s.fd);
        s.fd = -1;
        if (::unlinkat(dirfd_, name(seg).c_str(), 0) != 0) die("unlink segment");
    }
    void open_segment() {
        if (!segs_.empty()) drop_if_done(segs_.size() - 1);
        const int fd = ::openat(dirfd_, name(segs_.size()).c_str(),
                                O_RDWR | O_CREAT | O_EXCL | O_APPEND | O_CLOEXEC, 0600);
        if (fd < 0) die("create segment");
        segs_.push_back({fd, 0, 0});
        new_file_ = true;
    }
    fs::path dir_;
    std::size_t max_;
    int dirfd_ = -1;
    std::vector<Segment> segs_;
    std::vector<std::pair<std::size_t, std::size_t>> where_;  // id -> segment, offset
    std::size_t synced_ = 0;
    bool new_file_ = false;
};

template <class Store>
void run(Store& store, const Options& o) {
    const std::string data(o.size, 'x');
    std::string buf(o.size, '\0');
    const auto [busy0, total0] = cpu_jiffies();
    const double proc0 = process_cpu_seconds();
    const auto t0 = std::chrono::steady_clock::now();
    long syncs = 0;
    for (long first = 0; first < o.msgs; first += o.batch) {
        const long end = std::min(o.msgs, first + o.batch);
        for (long id = first; id < end; ++id) store.write(id, data);
        store.sync();
        ++syncs;
        for (long id = first; id < end; ++id) store.read(id, buf);
        for (long id = first; id < end; ++id) store.remove(id);
    }
    const double wall =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double proc = process_cpu_seconds() - proc0;
    const auto [busy1, total1] = cpu_jiffies();
    const double cpus = static_cast<double>(::sysconf(_SC_NPROCESSORS_ONLN));
    const double machine = (busy1 - busy0) / (total1 - total0) * cpus * wall;
    const double n = static_cast<double>(o.msgs);
    std::cout << "{\"design\": \"" << o.design << "\", \"msgs\": " << o.msgs
              << ", \"size\": " << o.size << ", \"batch\": " << o.batch
              << ", \"syncs\": " << syncs << ", \"msgs_per_s\": " << n / wall
              << ", \"process_cpu_ms_per_msg\": " << proc * 1e3 / n
              << ", \"machine_cpu_ms_per_msg\": " << machine * 1e3 / n << "}" << std::endl;
}

} // namespace

int main(int argc, char** argv) {
    Options o;
    try {
        Args a(argc, argv);
        while (a.next()) {
            if (a.opt() == "--design") o.design = a.value();
            else if (a.opt() == "--dir") o.dir = a.value();
            else if (a.opt() == "--msgs") o.msgs = a.number(1, 100'000'000);
            else if (a.opt() == "--size") o.size = parse_size(a.value());
            else if (a.opt() == "--batch") o.batch = a.number(1, 100'000);
            else if (a.opt() == "--segment") o.segment_bytes = parse_size(a.value());
            else throw std::invalid_argument("unknown option " + a.opt());
        }
        if (o.dir.empty()) throw std::invalid_argument("--dir is required");
        if (o.design != "files" && o.design != "segment")
            throw std::invalid_argument("--design is files or segment");
        if (o.size == 0 || o.segment_bytes < o.size)
            throw std::invalid_argument("--size must be at least 1 and at most --segment");
    } catch (const std::exception& e) {
        std::cerr << "smx-content-bench: " << e.what()
                  << "\nusage: smx-content-bench --dir DIR [--design files|segment] [--msgs N] "
                     "[--size BYTES] [--batch N] [--segment BYTES]\n";
        return 2;
    }
    fs::create_directories(o.dir);
    if (o.design == "files") {
        FileStore s(o.dir);
        run(s, o);
    } else {
        SegmentStore s(o.dir, o.segment_bytes);
        run(s, o);
    }
    return 0;
}
