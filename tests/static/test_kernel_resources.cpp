// The static resource check (DESIGN: Every GPU it claims): every CUDA kernel of the build, as
// compiled for each claimed architecture, against that architecture's limits
// (models/device_limits.h's table), with the launches its launchers plan for the presets'
// shapes. The report is tests/static/kernel_resources.sh's (path in SCALEBENCH_KERNEL_REPORT).
// A kernel that cannot launch fails; spills, and the blocks per SM of each planned launch, are
// printed.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "models/device_limits.h"

namespace sb {
namespace {

std::string report_text() {
    const char* path = std::getenv("SCALEBENCH_KERNEL_REPORT");
    if (!path) return "";
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
}

TEST(KernelResources, EveryKernelLaunchesOnEveryClaimedArchitecture) {
    const std::string text = report_text();
    ASSERT_FALSE(text.empty()) << "SCALEBENCH_KERNEL_REPORT names no readable report (kernel_resources.sh writes it)";
    const std::vector<KernelResources> kernels = parse_resource_usage(text);
    for (const DeviceLimits& limits : claimed_architectures()) {
        SCOPED_TRACE(limits.arch);
        int compiled = 0;
        for (const KernelResources& k : kernels) compiled += k.arch == limits.arch;
        EXPECT_GT(compiled, 0) << "no kernel compiled for " << limits.arch;
        const ResourceCheck check = check_resources(kernels, planned_launches(limits), limits);
        std::cout << limits.arch << ": " << compiled << " kernels (" << limits.source << ")\n";
        for (const std::string& note : check.notes) std::cout << "  " << note << "\n";
        for (const std::string& spill : check.spills) std::cout << "  spill: " << spill << "\n";
        for (const std::string& failure : check.failures) ADD_FAILURE() << failure;
    }
}

}  // namespace
}  // namespace sb
