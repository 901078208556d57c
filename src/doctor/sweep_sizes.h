// The collective tier's sizes (DESIGN: The doctor): each collective starts at 1 MiB and doubles,
// as nccl-tests' -f 2, until its busbw reaches the band's low end, or stops rising (less than 5%
// gained over the last two doublings), or the next size would pass --max-bytes or what the GPU's
// free memory holds. The rule is a pure function of the figures so far, tested without timing;
// the probe (live_cuda.cpp) measures, and the record keeps where each collective stopped and why.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace sb::doctor {

constexpr size_t kSweepFirstBytes = size_t{1} << 20;
// busbw counts as levelled off when the last size gained less than this over the size two
// doublings before it (assumption: nccl-tests' curves flatten to within a few percent).
constexpr double kSweepLevelGain = 0.05;

// Why a sweep stopped growing, as the record names it.
inline constexpr const char* kStopBandReached = "band_reached";  // busbw at or above the band's low end
inline constexpr const char* kStopLevel = "levelled_off";        // < kSweepLevelGain over two doublings
inline constexpr const char* kStopMaxBytes = "max_bytes";        // the next size would pass --max-bytes
inline constexpr const char* kStopMemory = "memory";             // ... or the free GPU memory's share

// The caps of one sweep: sizes are multiples of `align` bytes (4 x the ranks, so every rank's
// chunk is whole floats), at most `max_bytes` and at most `memory_bytes`.
struct SweepLimits {
    double target_gbps = 0;  // the band's low end; 0: no band, grow until busbw levels off
    size_t max_bytes = 0, memory_bytes = 0, align = 4;
};

// After the sizes measured so far (`busbw`, one per size, the last at `last_bytes`): "" and the
// next size (double the last, capped) to go on, or the reason to stop (kStop*).
struct SweepStep {
    std::string stop;
    size_t next_bytes = 0;
};
SweepStep sweep_step(const std::vector<double>& busbw, size_t last_bytes, const SweepLimits& limits);

// The first size: 1 MiB, or less where a cap is lower; 0 when no whole size fits.
size_t sweep_first_bytes(const SweepLimits& limits);

// One collective's sweep: `measure(bytes)` gives the busbw at a size (the slowest rank's, the
// same on every rank, so every rank takes the same next size). Returns the sizes, their busbw
// and why it stopped.
struct SweepResult {
    std::vector<size_t> sizes;
    std::vector<double> busbw;
    std::string stop;
};
SweepResult run_sweep(const std::function<double(size_t)>& measure, const SweepLimits& limits);

// The reason in words, for the check's figures ("busbw reached the band's low end").
std::string sweep_stop_text(const std::string& stop);

}  // namespace sb::doctor
