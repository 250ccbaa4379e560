#include "qmgr/ibdb_files.hpp"

#include "libsm/content_file.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace smx::qmgr::ibdb {

LogFiles::LogFiles(std::string dir, bool sync, asio::thread_pool& workers, IbdbStats& stats)
    : dir_(std::move(dir)), sync_(sync), workers_(workers), stats_(stats) {}

void LogFiles::recovered(const LogContents& log) {
    for (auto f : log.files) open_in_file_[f] = 0;
    if (!log.files.empty()) next_ = log.files.back() + 1;
    for (const auto& [file, ta] : log.tas) {
        TaState st{file, std::vector<std::uint8_t>(ta.rcpt_done.size(), 0)};
        for (std::size_t i = 0; i < st.rcpt.size(); ++i)
            st.rcpt[i] = ta.rcpt_done[i] ? 1 : ta.rcpt_deferred[i] ? 2 : 0;
        tas_.emplace(ta.envelope.ta_id, std::move(st));
        ++open_in_file_[file];
    }
    for (auto f : log.files) maybe_delete(f, true);
}

void LogFiles::logging(const std::string& ta_id, std::size_t rcpts) {
    tas_.emplace(ta_id, TaState{0, std::vector<std::uint8_t>(rcpts, 0)});
}

void LogFiles::placed(const std::string& ta_id) {
    auto it = tas_.find(ta_id);
    if (it == tas_.end() || it->second.file != 0) return;  // finished meanwhile
    it->second.file = cur_;
    ++open_in_file_[cur_];
}

void LogFiles::not_placed(const std::string& ta_id) {
    auto it = tas_.find(ta_id);
    if (it != tas_.end() && it->second.file == 0) tas_.erase(it);
}

bool LogFiles::mark(const std::string& ta_id, std::uint32_t idx, RecType type) {
    auto it = tas_.find(ta_id);
    if (it == tas_.end() || idx >= it->second.rcpt.size()) return false;
    auto& rcpt = it->second.rcpt;
    rcpt[idx] = type == rcpt_done ? 1 : 2;
    // Every recipient final with some in DEFEDB: the log no longer holds it.
    const bool all_final = std::all_of(rcpt.begin(), rcpt.end(), [](auto s) { return s != 0; });
    if (all_final && std::find(rcpt.begin(), rcpt.end(), 2) != rcpt.end()) leave(it);
    return true;
}

bool LogFiles::done(const std::string& ta_id) {
    auto it = tas_.find(ta_id);
    if (it == tas_.end()) return false;
    leave(it);
    return true;
}

void LogFiles::leave(std::unordered_map<std::string, TaState>::iterator it) {
    const std::uint32_t f = it->second.file;
    tas_.erase(it);
    auto fit = open_in_file_.find(f);
    if (fit != open_in_file_.end() && --fit->second == 0) maybe_delete(f, false);
}

void LogFiles::switched(std::uint32_t file, int fd) {
    const std::uint32_t old = cur_;
    fd_ = fd;
    cur_ = file;
    next_ = cur_ + 1;
    end_ = 0;
    open_in_file_.emplace(cur_, 0);
    maybe_delete(old, false);
}

void LogFiles::wrote(std::uint64_t end) {
    end_ = end;
    last_write_ = Clock::now();
}

// Deletes a finished file that is no longer appended to.
void LogFiles::maybe_delete(std::uint32_t f, bool now) {
    auto it = open_in_file_.find(f);
    if (it == open_in_file_.end() || it->second != 0 || f == cur_) return;
    open_in_file_.erase(it);
    ++stats_.files_deleted;
    spdlog::info("ibdb: {} deleted, no open transactions", file_name(f));
    remove(dir_ + "/" + file_name(f), -1, now);
}

void LogFiles::retire(bool now) {
    spdlog::info("ibdb: {} deleted, nothing open", file_name(cur_));
    open_in_file_.erase(cur_);
    ++stats_.files_deleted;
    remove(dir_ + "/" + file_name(cur_), fd_, now);
    fd_ = -1;
    cur_ = 0;
    end_ = 0;
}

void LogFiles::remove(const std::string& path, int fd, bool now) {
    auto rm = [fd, path, dir = dir_, sync = sync_] {
        if (fd >= 0) ::close(fd);
        if (::unlink(path.c_str()) != 0 && errno != ENOENT)
            spdlog::error("ibdb: unlink {}: {}", path, std::strerror(errno));
        if (sync) smx::content::sync_dir(dir);
    };
    if (now)
        rm();
    else
        asio::post(workers_, rm);
}

void LogFiles::close() {
    if (fd_ < 0) return;
    if (tas_.empty())
        retire(true);
    else
        ::close(std::exchange(fd_, -1));
}

} // namespace smx::qmgr::ibdb
