// sysfs readings of GPUs and the paths between them (Linux /sys/bus/pci/devices), and the
// rank's CPU binding.
#include "src/doctor/live_reader.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include <fmt/format.h>

#include "src/doctor/checks.h"

namespace sb::doctor {

namespace fs = std::filesystem;

namespace {

const fs::path kPciDevices = "/sys/bus/pci/devices";

std::string read_line(const fs::path& p) {
    std::ifstream in(p);
    std::string line;
    std::getline(in, line);
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
}

// "16.0 GT/s PCIe" -> 4 (2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4, 32 -> 5, 64 -> 6); 0 unknown.
int gen_of_speed(const std::string& text) {
    double gts = 0;
    if (std::sscanf(text.c_str(), "%lf", &gts) != 1) return 0;
    const double speeds[] = {2.5, 5, 8, 16, 32, 64};
    for (int i = 0; i < 6; ++i)
        if (std::abs(gts - speeds[i]) < 0.1) return i + 1;
    return 0;
}

PcieLink link_of(const fs::path& dev, const char* speed_file, const char* width_file) {
    PcieLink l;
    l.gen = gen_of_speed(read_line(dev / speed_file));
    const std::string w = read_line(dev / width_file);
    l.width = w.empty() ? 0 : std::atoi(w.c_str());
    return l;
}

// The device's chain of PCI functions from the root port down, e.g. {0000:00:01.0,
// 0000:01:00.0, 0000:02:08.0, 0000:03:00.0}, and its root ("pci0000:00").
struct PciChain {
    std::string root;
    std::vector<std::string> functions;
};
PciChain chain_of(const std::string& bus_id) {
    PciChain c;
    std::error_code ec;
    const fs::path real = fs::canonical(kPciDevices / bus_id, ec);
    if (ec) return c;
    for (const fs::path& part : real) {
        const std::string s = part.string();
        if (s.rfind("pci", 0) == 0) c.root = s;
        else if (std::count(s.begin(), s.end(), ':') == 2 && s.find('.') != std::string::npos) c.functions.push_back(s);
    }
    return c;
}

std::vector<unsigned char> config_space(const std::string& function) {
    std::ifstream in(kPciDevices / function / "config", std::ios::binary);
    return std::vector<unsigned char>(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

std::string sysfs_bus_id(const std::string& cuda_bus_id) {
    std::string id = cuda_bus_id;
    std::transform(id.begin(), id.end(), id.begin(), [](unsigned char c) { return std::tolower(c); });
    const size_t colon = id.find(':');
    if (colon != std::string::npos && colon > 4) id = id.substr(colon - 4);  // 8-digit domain -> 4
    return id;
}

void read_sysfs_gpu(GpuReading& g) {
    const std::string id = sysfs_bus_id(g.pci_bus_id);
    const fs::path dev = kPciDevices / id;
    if (!fs::exists(dev)) return;
    const std::string numa = read_line(dev / "numa_node");
    if (!numa.empty()) g.numa_node = std::atoi(numa.c_str());
    g.local_cpus = read_line(dev / "local_cpulist");
    // resource: one "start end flags" line per region; BAR1 is region 1.
    std::ifstream res(dev / "resource");
    std::string line;
    for (int region = 0; std::getline(res, line); ++region) {
        unsigned long long start = 0, end = 0, flags = 0;
        if (region == 1 && std::sscanf(line.c_str(), "%llx %llx %llx", &start, &end, &flags) == 3 && end > start)
            g.bar1_mib = static_cast<double>(end - start + 1) / (1024.0 * 1024.0);
    }
    std::error_code ec;
    if (fs::exists(dev / "iommu_group", ec)) {
        const std::string type = read_line(dev / "iommu_group" / "type");
        g.iommu = type.empty() ? "on (type not readable)" : type;
    } else if (fs::exists("/sys/class/iommu", ec)) {
        g.iommu = fs::is_empty("/sys/class/iommu", ec) ? "off" : "";
    }
    // The physical package of the GPU's first local CPU: NUMA nodes of one socket are not a socket link.
    const std::vector<int> cpus = parse_cpu_list(g.local_cpus);
    if (!cpus.empty()) {
        const std::string pkg =
            read_line(fmt::format("/sys/devices/system/cpu/cpu{}/topology/physical_package_id", cpus.front()));
        if (!pkg.empty()) g.socket = std::atoi(pkg.c_str());
    }
    PcieLink max = link_of(dev, "max_link_speed", "max_link_width");
    g.pcie_card_max = max;  // the GPU function's own LnkCap
    // The system's maximum is the lower of the GPU's and the slot's (the upstream port).
    const PciChain chain = chain_of(id);
    if (chain.functions.size() >= 2) {
        const PcieLink up = link_of(kPciDevices / chain.functions[chain.functions.size() - 2], "max_link_speed",
                                    "max_link_width");
        if (up.gen > 0) max.gen = std::min(max.gen, up.gen);
        if (up.width > 0) max.width = std::min(max.width, up.width);
    }
    g.pcie_max = max;
    g.pcie_idle = read_current_link(g.pci_bus_id);
}

PcieLink read_current_link(const std::string& bus_id) {
    return link_of(kPciDevices / sysfs_bus_id(bus_id), "current_link_speed", "current_link_width");
}

void read_sysfs_pair(PairReading& p, const GpuReading& a, const GpuReading& b) {
    const PciChain ca = chain_of(sysfs_bus_id(a.pci_bus_id)), cb = chain_of(sysfs_bus_id(b.pci_bus_id));
    if (ca.functions.empty() || cb.functions.empty()) return;
    size_t common = 0;
    while (common < ca.functions.size() && common < cb.functions.size() && ca.root == cb.root &&
           ca.functions[common] == cb.functions[common])
        ++common;
    if (common > 0) p.pcie_path = "same_switch";  // below a shared bridge
    else if (a.socket >= 0 && b.socket >= 0 && a.socket != b.socket) p.pcie_path = "socket_link";
    else if (a.numa_node >= 0 && b.numa_node >= 0 && a.numa_node != b.numa_node)
        p.pcie_path = a.socket >= 0 && b.socket >= 0 ? "same_socket" : "socket_link";
    else p.pcie_path = "root_complex";
    if (p.path != "nvlink") p.path = p.pcie_path;
    // ACS on every bridge above either GPU (the functions before each GPU itself).
    p.acs_read = 1;
    std::vector<std::string> bridges;
    for (const PciChain* c : {&ca, &cb})
        for (size_t i = 0; i + 1 < c->functions.size(); ++i)
            if (std::find(bridges.begin(), bridges.end(), c->functions[i]) == bridges.end())
                bridges.push_back(c->functions[i]);
    for (const std::string& bridge : bridges) {
        const int acs = acs_redirect(config_space(bridge));
        if (acs < 0) p.acs_read = 0;
        if (acs == 1) p.acs_redirect_bridges.push_back(bridge);
    }
}

SystemSnapshot read_sysfs_host(const std::string& host) {
    SystemSnapshot s;
    std::vector<std::string> ids;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(kPciDevices, ec))
        if (read_line(e.path() / "vendor") == "0x10de" && read_line(e.path() / "class").rfind("0x03", 0) == 0)
            ids.push_back(e.path().filename().string());
    std::sort(ids.begin(), ids.end());  // bus order, as CUDA_DEVICE_ORDER=PCI_BUS_ID numbers them
    for (const std::string& id : ids) {
        GpuReading g;
        g.index = static_cast<int>(s.gpus.size());
        g.host = host;
        g.name = "NVIDIA PCI device " + read_line(kPciDevices / id / "device");
        g.pci_bus_id = id;
        read_sysfs_gpu(g);
        s.gpus.push_back(g);
    }
    for (size_t a = 0; a < s.gpus.size(); ++a)
        for (size_t b = a + 1; b < s.gpus.size(); ++b) {
            PairReading p;
            p.host = host;
            p.a = static_cast<int>(a);
            p.b = static_cast<int>(b);
            read_sysfs_pair(p, s.gpus[a], s.gpus[b]);
            s.pairs.push_back(p);
        }
    return s;
}

std::vector<std::string> transport_env() {
    static const char* const names[] = {
        "NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL",  "NCCL_SHM_DISABLE",   "NCCL_NVLS_ENABLE",    "NCCL_ALGO",
        "NCCL_PROTO",       "NCCL_NET",        "NCCL_IB_DISABLE",    "NCCL_CUMEM_ENABLE",   "NCCL_MAX_NCHANNELS",
        "NCCL_MIN_NCHANNELS", "NCCL_P2P_USE_CUDA_MEMCPY", "CUDA_LAUNCH_BLOCKING", "CUDA_DEVICE_MAX_CONNECTIONS"};
    std::vector<std::string> out;
    for (const char* n : names)
        if (const char* v = std::getenv(n)) out.push_back(fmt::format("{}={}", n, v));
    return out;
}

int64_t read_xids(const std::string& bus_id, std::string* codes) {
    // "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
    FILE* pipe = popen("dmesg 2>/dev/null | grep 'NVRM: Xid' | tail -n 1000", "r");
    if (!pipe) return -1;
    std::string text;
    char buf[4096];
    while (fgets(buf, sizeof(buf), pipe)) text += buf;
    pclose(pipe);
    // No line: either no XID, or dmesg refused (dmesg_restrict) and the log is unread.
    if (text.empty() && std::system("dmesg >/dev/null 2>&1") != 0) return -1;
    return parse_xids(text, sysfs_bus_id(bus_id), codes);
}

std::string bound_cpus() {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return "";
    std::string out;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        int last = c;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
        out += (out.empty() ? "" : ",") + (last == c ? std::to_string(c) : fmt::format("{}-{}", c, last));
        c = last;
    }
    return out;
}

void on_cpus(const std::string& cpus, const std::function<void()>& fn) {
    cpu_set_t saved, want;
    CPU_ZERO(&want);
    for (int c : parse_cpu_list(cpus))
        if (c < CPU_SETSIZE) CPU_SET(c, &want);
    const bool moved = CPU_COUNT(&want) > 0 && sched_getaffinity(0, sizeof(saved), &saved) == 0 &&
                       sched_setaffinity(0, sizeof(want), &want) == 0;
    fn();
    if (moved) sched_setaffinity(0, sizeof(saved), &saved);
}

}  // namespace sb::doctor
