// The collective sweep's stopping rule (sweep_sizes.h).
#include "src/doctor/sweep_sizes.h"

#include <algorithm>

#include <fmt/format.h>

namespace sb::doctor {

namespace {

size_t aligned(size_t bytes, const SweepLimits& l) {
    const size_t align = std::max<size_t>(l.align, 1);
    return bytes / align * align;
}

size_t cap_of(const SweepLimits& l) { return aligned(std::min(l.max_bytes, l.memory_bytes), l); }

// Which cap a sweep at `cap_of` stopped at (--max-bytes where both are the same).
const char* cap_reason(const SweepLimits& l) {
    return aligned(l.max_bytes, l) <= aligned(l.memory_bytes, l) ? kStopMaxBytes : kStopMemory;
}

}  // namespace

size_t sweep_first_bytes(const SweepLimits& limits) { return aligned(std::min(kSweepFirstBytes, cap_of(limits)), limits); }

SweepStep sweep_step(const std::vector<double>& busbw, size_t last_bytes, const SweepLimits& limits) {
    SweepStep step;
    const size_t n = busbw.size();
    if (n > 0 && limits.target_gbps > 0 && busbw.back() >= limits.target_gbps) {
        step.stop = kStopBandReached;
    } else if (n >= 3 && busbw.back() < busbw[n - 3] * (1 + kSweepLevelGain)) {
        step.stop = kStopLevel;
    } else if (last_bytes >= cap_of(limits)) {
        step.stop = cap_reason(limits);
    } else {
        step.next_bytes = std::min(2 * last_bytes, cap_of(limits));
    }
    return step;
}

SweepResult run_sweep(const std::function<double(size_t)>& measure, const SweepLimits& limits) {
    SweepResult r;
    size_t bytes = sweep_first_bytes(limits);
    if (bytes == 0) {
        r.stop = cap_reason(limits);
        return r;
    }
    while (true) {
        r.sizes.push_back(bytes);
        r.busbw.push_back(measure(bytes));
        const SweepStep step = sweep_step(r.busbw, bytes, limits);
        if (!step.stop.empty()) {
            r.stop = step.stop;
            return r;
        }
        bytes = step.next_bytes;
    }
}

std::string sweep_stop_text(const std::string& stop) {
    if (stop == kStopBandReached) return "busbw reached the band's low end";
    if (stop == kStopLevel)
        return fmt::format("busbw levelled off (less than {:.0f}% gained over two doublings)", kSweepLevelGain * 100);
    if (stop == kStopMaxBytes) return "--max-bytes reached before busbw levelled off";
    if (stop == kStopMemory) return "the GPU's free memory reached before busbw levelled off";
    return stop;
}

}  // namespace sb::doctor
