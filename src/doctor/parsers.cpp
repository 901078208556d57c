// The text and byte readers the live doctor relies on: CPU lists, the ACS control of a PCIe
// function's config space, NCCL's transports from its INFO log and XIDs from the kernel log (checks.h).
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "src/doctor/checks.h"

namespace sb::doctor {

std::vector<int> parse_cpu_list(const std::string& text) {
    std::vector<int> cpus;
    std::stringstream in(text);
    std::string part;
    while (std::getline(in, part, ',')) {
        while (!part.empty() && std::isspace(static_cast<unsigned char>(part.back()))) part.pop_back();
        if (part.empty()) continue;
        int lo = 0, hi = 0;
        char extra = 0;
        if (std::sscanf(part.c_str(), "%d-%d%c", &lo, &hi, &extra) == 2) {
        } else if (std::sscanf(part.c_str(), "%d%c", &lo, &extra) == 1) {
            hi = lo;
        } else {
            return {};
        }
        if (lo < 0 || hi < lo) return {};
        for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    }
    return cpus;
}

int acs_redirect(const std::vector<unsigned char>& config) {
    if (config.size() < 4096) return -1;
    auto u32 = [&](size_t at) {
        return static_cast<uint32_t>(config[at]) | static_cast<uint32_t>(config[at + 1]) << 8 |
               static_cast<uint32_t>(config[at + 2]) << 16 | static_cast<uint32_t>(config[at + 3]) << 24;
    };
    // Extended capabilities: a list from 0x100, each header ID (16 bits), version (4), next (12).
    size_t at = 0x100;
    for (int hops = 0; at >= 0x100 && at + 8 <= config.size() && hops < 64; ++hops) {
        const uint32_t header = u32(at);
        if (header == 0 || header == 0xffffffffu) return 0;
        if ((header & 0xffff) == 0x000d) {  // ACS: control register at +6; bit 2 request, bit 3 completion redirect
            const unsigned control = config[at + 6] | config[at + 7] << 8;
            return (control & 0x0c) ? 1 : 0;
        }
        at = header >> 20;
        if (at == 0) return 0;
    }
    return 0;
}

std::vector<std::string> parse_nccl_transports(const std::string& log) {
    std::vector<std::string> out;
    std::stringstream in(log);
    std::string line;
    bool nvls = false;
    while (std::getline(in, line)) {
        if (line.find("NVLS comm") != std::string::npos) nvls = true;
        if (line.find("Channel") == std::string::npos) continue;
        const size_t via = line.find(" via ");
        if (via == std::string::npos) continue;
        std::string rest = line.substr(via + 5);
        const size_t end = rest.find_first_of(" \t\r");
        if (end != std::string::npos) rest.resize(end);
        // Keep the transport and its kind: "P2P/IPC/read" -> "P2P/IPC", "SHM/direct/direct" -> "SHM",
        // "NET/Socket/0" -> "NET/Socket".
        const size_t first = rest.find('/');
        std::string name = rest.substr(0, first);
        if (name != "SHM" && first != std::string::npos) {
            const size_t second = rest.find('/', first + 1);
            name = rest.substr(0, second);
        }
        if (!name.empty()) out.push_back(name);
    }
    if (nvls) out.push_back("NVLS");
    return out;
}

int64_t parse_xids(const std::string& log, const std::string& bus_id, std::string* codes) {
    std::string id = bus_id.substr(0, bus_id.rfind('.'));  // "0000:3b:00.0" -> "0000:3b:00"
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    const std::string key = "pci:" + id + "):";
    int64_t count = 0;
    std::vector<std::string> seen;
    std::stringstream in(log);
    std::string line;
    while (std::getline(in, line)) {
        std::string lower = line;
        std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
        if (lower.find("nvrm: xid") == std::string::npos) continue;
        const size_t at = lower.find(key);
        if (at == std::string::npos) continue;
        ++count;
        const std::string code = std::to_string(std::atoi(line.c_str() + at + key.size()));
        if (std::find(seen.begin(), seen.end(), code) == seen.end()) seen.push_back(code);
    }
    codes->clear();
    for (const std::string& c : seen) *codes += (codes->empty() ? "" : ", ") + c;
    return count;
}

}  // namespace sb::doctor
