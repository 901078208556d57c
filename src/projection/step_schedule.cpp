// The schedule (src/projection/projection.h): the step's collectives replayed against its ops on one
// comm stream as the runner issues and waits for them, the straggler wait of N ranks, and the model's assumptions
// in words.
#include "src/projection/projection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

double expected_max_of_normals(int n) {
    SB_REQUIRE(n >= 1, "expected_max_of_normals: n >= 1");
    if (n == 1) return 0;
    // Every projection asks for it, and bands ask many times: each n is integrated once.
    static std::mutex mutex;
    static std::map<int, double> known;
    const std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = known.find(n); it != known.end()) return it->second;
    // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule over [-12, 12].
    constexpr int kSteps = 24000;
    constexpr double kLo = -12, kHi = 12, kDx = (kHi - kLo) / kSteps;
    double sum = 0;
    for (int i = 0; i < kSteps; ++i) {
        const double x = kLo + (i + 0.5) * kDx;
        const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
        const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
        sum += x * n * phi * std::pow(cdf, n - 1) * kDx;
    }
    return known[n] = sum;
}

ProjectedStep schedule_step(const StepTrace& trace, const CostModel& model, int g, int nodes) {
    ProjectedStep s;
    s.world_size = g * nodes;
    s.nodes = nodes;
    // The comm stream: a collective starts when the op after which it was issued is done and the
    // stream is free; while it runs, compute progresses at the rate it leaves (overlapped_compute_rate);
    // the op before which the step waits for it starts no earlier than its end.
    struct Busy {
        double start, end;
        const TracedCollective* c;
    };
    std::vector<Busy> comm;
    size_t active = 0;
    double t = 0, comm_free = 0;
    auto issue = [&](size_t position) {
        for (size_t i = comm.size(); i < trace.collectives.size() && trace.collectives[i].issued_after <= position; ++i) {
            const TracedCollective& c = trace.collectives[i];
            const double ms = model.collective_ms(c.kind, c.bytes, g, nodes);
            const double start = std::max(comm_free, t);
            comm.push_back({start, comm_free = start + ms, &c});
            (c.kind == Collective::all_reduce ? s.allreduce_ms
                                              : c.kind == Collective::reduce_scatter ? s.reduce_scatter_ms : s.all_gather_ms) += ms;
        }
    };
    auto wait = [&](size_t position) {
        for (const Busy& b : comm)
            if (b.c->waited_at == position) t = std::max(t, b.end);
    };
    auto run = [&](const TracedOp& op) {
        const CostModel::OpTime cost = model.op_time(op, trace.precision);
        double work = cost.ms;  // at the full rate
        while (work > 0) {
            while (active < comm.size() && comm[active].end <= t) ++active;
            if (active == comm.size() || comm[active].start > t) {
                // Nothing on the comm stream until the next collective starts (or at all).
                const double free_until = active < comm.size() ? comm[active].start : INFINITY;
                const double done = std::min(work, free_until - t);
                t += done;
                work -= done;
                continue;
            }
            const Busy& c = comm[active];
            const double rate =
                model.overlapped_compute_rate(c.c->kind, c.c->bytes, c.end - c.start, g, nodes, cost.memory_bound);
            const double room = (c.end - t) * rate;  // the work that fits before this collective ends
            if (work < room) {
                t += work / rate;
                work = 0;
            } else {
                t = c.end;
                work -= room;
            }
        }
    };
    // Phases as the runner times them: compute to the end of the backward, exposed communication
    // to the optimizer (the waits for the buckets), the optimizer to the end (sharded: with the
    // all-gather of the parameters).
    double optimizer_start = 0;
    for (size_t i = 0; i <= trace.ops.size(); ++i) {
        issue(i);
        if (i == trace.backward_end) s.compute_ms = t;
        wait(i);
        if (i == trace.optimizer_begin) {
            s.exposed_comm_ms = t - s.compute_ms;
            optimizer_start = t;
        }
        if (i < trace.ops.size()) run(trace.ops[i]);
    }
    s.optimizer_ms = t - optimizer_start;
    // The slowest of N ranks: each rank's step a normal draw around this one (sigma step_jitter_pct
    // of it); the others wait for it in the all-reduce, which the runner times as exposed communication.
    s.straggler_ms = expected_max_of_normals(s.world_size) * model.hw.step_jitter_pct.value / 100.0 * t;
    s.exposed_comm_ms += s.straggler_ms;
    // The framework's own cost at N > 1 (DDP's hooks and bucket copies) sits between backward and the
    // optimizer, where a runner times its exposed communication: charged there too.
    s.framework_ms = s.world_size > 1 ? model.hw.framework_step_ms.value : 0.0;
    s.exposed_comm_ms += s.framework_ms;
    s.step_ms = t + s.straggler_ms + s.framework_ms;
    return s;
}

std::vector<std::string> projection_assumptions(const CostModel& m) {
    std::vector<std::string> a = {
        "op time = max(FLOPs / (peak x GEMM efficiency), bytes / (memory bandwidth x memory efficiency)) + kernel gap",
        "GEMM efficiency = large-shape efficiency x wave quantization over 128x128 tiles on the SMs x K fill k/(k+128)",
        "non-GEMM ops are memory-bound: every operand read once, every result written once",
        "on one GPU each bucket's all-reduce (ncclAvg) reads and writes its bytes once (NCCL's one-rank reduce kernel); "
        "on any number, a collective lasts at least its device memory traffic at the copy rate",
        "all-reduce: ring, 2(n-1) steps of link latency + 2(n-1)/n x bytes / busbw within a node; across nodes "
        "reduce-scatter and all-gather within the node around a ring or tree (the faster) between nodes",
        "sharded steps: each bucket's reduce-scatter and all-gather are half the all-reduce's ring at the same busbw, "
        "(n-1) steps of link latency + (n-1)/n x bytes / busbw within a node, half its ring between nodes",
        "buckets start in order on one comm stream when the op that made their last gradient is done; the op the "
        "runner waits for a collective before starts no earlier than its end",
        "exposed communication = wait for the last bucket after backward, plus the work issued after the waits "
        "(16-bit gradient casts back, fp16 unscale)",
        fmt::format("each bucket's all-reduce call costs its launch ({:g} us) besides 2(n-1) ring steps of link latency",
                    m.hw.bucket_launch_us.value),
        fmt::format("the step of N ranks is the slowest of N: the expected maximum of N normal draws of sigma {:g}% of the "
                    "step (0 at one rank, {:.2f} sigma at 8), charged as exposed communication",
                    m.hw.step_jitter_pct.value, expected_max_of_normals(8)),
        fmt::format("at N > 1 ranks the framework's own cost per step ({:g} ms, PyTorch DDP's hooks and bucket copies) "
                    "adds to the step", m.hw.framework_step_ms.value),
        fmt::format("every op's time is scaled by the compute model's error on this GPU ({:+g}%; its range is in the bands)",
                    m.hw.compute_error_pct.value),
        "one step of a steady state: no host launch gaps; data loading is outside the model (the runner's data is on "
        "the device)",
        fmt::format("link class {}: busbw {:.1f} GB/s within a node of {} GPUs{}", link_class_name(m.hw.link),
                    m.ring_busbw_gbps(static_cast<int>(m.hw.gpus_per_node.value)), static_cast<int>(m.hw.gpus_per_node.value),
                    m.hw.nvls_busbw_gbps.value > 0 ? " (NCCL's NVLS above 4 GPUs, the ring's up to 4)" : ""),
    };
    for (const auto& n : m.calibration.notes) a.push_back("calibration: " + n);
    if (m.calibration.notes.empty()) a.push_back("no calibration: every figure from the profile");
    return a;
}

}  // namespace sb
