#include "quarantine.hpp"

#include "content_file.hpp"

#include <cstring>

namespace smx::qmgr {

std::string quarantine_write(const std::string& dir, const std::string& name,
                             std::string_view bytes) {
    const std::string path = dir + "/" + name;
    const int err = sm::content::write_durable(path, bytes, 0600);  // QMGR's alone
    return err ? path + ": " + std::strerror(err) : std::string();
}

} // namespace smx::qmgr
