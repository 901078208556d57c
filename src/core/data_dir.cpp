// The shipped data's folder (src/core/data_dir.h).
#include "src/core/data_dir.h"

#include <filesystem>
#include <system_error>

namespace sb {

namespace {

namespace fs = std::filesystem;

bool has_configs(const fs::path& dir) {
    std::error_code ec;
    return !dir.empty() && fs::is_directory(dir / "configs", ec);
}

std::string find_data_dir() {
    std::error_code ec;
    const fs::path exe = fs::canonical("/proc/self/exe", ec);
    // Installed: PREFIX/bin/scalebench reads PREFIX/share/scalebench.
    if (!ec) {
        const fs::path share = exe.parent_path().parent_path() / "share" / "scalebench";
        if (has_configs(share)) return share.string();
    }
    // A build tree: the sources it was configured from (CMakeLists.txt sets SCALEBENCH_SOURCE_DIR here).
    if (has_configs(SCALEBENCH_SOURCE_DIR)) return SCALEBENCH_SOURCE_DIR;
    return "";
}

}  // namespace

const std::string& data_dir() {
    static const std::string dir = find_data_dir();
    return dir;
}

std::string shipped_path(const std::string& relative) {
    // Run from the data folder itself (a checkout), paths stay relative: "configs/hardware", as typed.
    static const bool here = [] {
        std::error_code ec;
        return !data_dir().empty() && fs::equivalent(data_dir(), fs::current_path(ec), ec);
    }();
    if (data_dir().empty()) return "";
    return here ? relative : (fs::path(data_dir()) / relative).string();
}

std::string input_path(const std::string& path) {
    const fs::path p(path);
    std::error_code ec;
    if (p.is_absolute() || p.empty() || *p.begin() != "configs" || fs::exists(p, ec)) return path;
    const std::string shipped = shipped_path(path);
    return !shipped.empty() && fs::exists(shipped, ec) ? shipped : path;
}

}  // namespace sb
