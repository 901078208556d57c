// The cost model (src/projection/projection.h): each op's time from a roofline with a shape-dependent
// GEMM efficiency, each collective (all-reduce, reduce-scatter, all-gather) from an alpha-beta model
// per link class, and what a collective leaves to the compute it overlaps.
#include "src/projection/projection.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <fmt/format.h>

#include "base/errors.h"

namespace sb {

double median_value(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t h = v.size() / 2;
    return v.size() % 2 ? v[h] : 0.5 * (v[h - 1] + v[h]);
}

namespace {

int precision_index(Precision p) { return static_cast<int>(p); }

}  // namespace

double CostModel::gemm_shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch) const {
    constexpr double kTile = 128.0, kFill = 128.0;
    // cuBLAS splits a long K over several blocks when the output tiles leave SMs idle (the
    // weight gradients of convolutions: 64 x 576 outputs over 800 k rows), each split at
    // least kMinSplitK deep; the partial products' reduction is small next to the operands.
    constexpr double kMinSplitK = 512.0;
    const double sms = hw.sm_count.value;
    const double tiles = std::ceil(m / kTile) * std::ceil(n / kTile) * static_cast<double>(batch);
    const double splits = std::max(1.0, std::min(std::floor(sms / tiles), std::floor(k / kMinSplitK)));
    const double blocks = tiles * splits;
    const double waves = std::ceil(blocks / sms);
    // A partly filled tile does full work: count the useful fraction of the tiles too.
    const double fill_mn = (static_cast<double>(m) * n * batch) / (tiles * kTile * kTile);
    const double k_per_block = k / splits;
    return blocks / (waves * sms) * fill_mn * (k_per_block / (k_per_block + kFill));
}

double CostModel::peak_tflops(Precision precision) const {
    const double clock = hw.clock_factor.value;
    switch (precision) {
        case Precision::fp32: return clock * hw.peak.fp32_tflops;
        case Precision::tf32: return clock * hw.peak.tf32_tflops;
        case Precision::bf16: return clock * hw.peak.bf16_tflops;
        case Precision::fp16: return clock * hw.peak.fp16_tflops;
    }
    return 0;
}

double CostModel::measured_efficiency(const ProfiledOp& p) const {
    // The time the op kept the GPU busy: its measured time less the gap op_ms adds back; at
    // least half the measured time, so an op that is nearly all launch still has a rate.
    const double busy_s = std::max(p.ms - hw.kernel_gap_us.value * 1e-3, 0.5 * p.ms) * 1e-3;
    if (p.op.tensor_core) return p.op.flops / busy_s / (peak_tflops(p.precision) * 1e12);
    return p.op.bytes / busy_s / (hw.peak.mem_bw_gbps * 1e9);
}

const ProfiledOp* CostModel::closest_profiled(const TracedOp& op, Precision precision) const {
    auto log_ratio = [](int64_t a, int64_t b) {
        return a == b ? 0.0 : a > 0 && b > 0 ? std::abs(std::log(static_cast<double>(a) / static_cast<double>(b)))
                                             : INFINITY;
    };
    const double limit = std::log(kCloseFactor) * (1 + 1e-12);
    const ProfiledOp* best = nullptr;
    double best_distance = INFINITY;
    for (const ProfiledOp& p : calibration.profiled_ops) {
        const TracedOp& q = p.op;
        if (q.kind != op.kind || q.variant != op.variant || q.dtype != op.dtype || q.tensor_core != op.tensor_core ||
            q.trans_a != op.trans_a || q.trans_b != op.trans_b || (op.tensor_core && p.precision != precision))
            continue;
        const double d[4] = {log_ratio(q.m, op.m), log_ratio(q.n, op.n), log_ratio(q.k, op.k),
                             log_ratio(q.batch, op.batch)};
        if (*std::max_element(d, d + 4) > limit) continue;
        // Of equally near shapes the one whose bytes are nearest (bias, accumulation).
        const double distance =
            d[0] + d[1] + d[2] + d[3] + (q.bytes > 0 && op.bytes > 0 ? 1e-6 * std::abs(std::log(q.bytes / op.bytes)) : 0);
        if (distance < best_distance) {
            best = &p;
            best_distance = distance;
        }
    }
    return best;
}

double CostModel::profiled_kind_efficiency(const std::string& kind, Precision precision, double min_bytes) const {
    // Work per step over time per step at the rate each call implies.
    double work = 0, at_full_rate = 0;
    for (const ProfiledOp& p : calibration.profiled_ops) {
        if (p.op.kind != kind || (p.op.tensor_core && p.precision != precision)) continue;
        if (!p.op.tensor_core && p.op.bytes < min_bytes) continue;
        const double w = (p.op.tensor_core ? p.op.flops : p.op.bytes) * p.calls_per_step;
        const double e = p.op.tensor_core ? measured_efficiency(p) / gemm_shape_factor(p.op) : measured_efficiency(p);
        work += w;
        at_full_rate += w / e;
    }
    return work > 0 ? work / at_full_rate : -1;
}

double CostModel::benchmarked_tflops(Precision precision) const {
    return peak_tflops(precision) / hw.clock_factor.value;
}

double CostModel::profile_gemm_base(Precision precision) const {
    std::vector<double> bases;
    for (const PublishedGemm& g : hw.gemm)
        if (g.precision == precision) bases.push_back(g.tflops / benchmarked_tflops(precision) / gemm_shape_factor(g.m, g.n, g.k, 1));
    SB_REQUIRE(!bases.empty(), fmt::format("{}: no {} GEMM rate", hw.source, precision_name(precision)));
    return median_value(bases);
}

double CostModel::gemm_fraction_cap(Precision precision) const {
    double cap = 1.0;
    for (const PublishedGemm& g : hw.gemm)
        if (g.precision == precision) cap = std::max(cap, g.tflops / benchmarked_tflops(precision));
    return cap;
}

double CostModel::gemm_efficiency(const TracedOp& op, Precision precision) const {
    const double cap = gemm_fraction_cap(precision);
    if (const ProfiledOp* near = closest_profiled(op, precision))
        return std::min(cap, measured_efficiency(*near) * gemm_shape_factor(op) / gemm_shape_factor(near->op));
    // Attention's products at its kind's measured rate (there is no `gemm` sweep of them).
    if (const double base = profiled_kind_efficiency(op.kind, precision); op.kind != "gemm" && base > 0)
        return std::min(cap, base * gemm_shape_factor(op));
    std::vector<double> same_shape;
    for (const auto& g : calibration.gemms)
        if (g.precision == precision_index(precision) && g.m == op.m && g.n == op.n && g.k == op.k && op.batch == 1)
            same_shape.push_back(g.fraction);
    if (same_shape.empty() && op.batch == 1)
        for (const PublishedGemm& g : hw.gemm)
            if (g.precision == precision && g.m == op.m && g.n == op.n && g.k == op.k)
                same_shape.push_back(g.tflops / benchmarked_tflops(precision));
    if (!same_shape.empty()) return std::min(cap, median_value(same_shape));
    double base = calibration.gemm_base[precision_index(precision)];
    if (base < 0) base = profile_gemm_base(precision);
    return std::min(cap, base * gemm_shape_factor(op));
}

double CostModel::memory_gbps() const {
    return calibration.memory_efficiency > 0 ? hw.peak.mem_bw_gbps * calibration.memory_efficiency : hw.copy_gbps.value;
}

double CostModel::l2_hit_fraction(const TracedOp& op) const {
    if (hw.l2_copy_gbps.value <= 0 || op.tensor_core || op.bytes <= 0) return 0;
    return std::min(1.0, hw.l2_mb.value * 1024.0 * 1024.0 / op.bytes);
}

double CostModel::memory_fraction(const TracedOp& op) const {
    if (!op.tensor_core) {
        if (const ProfiledOp* near = closest_profiled(op, Precision::fp32)) return measured_efficiency(*near);
        // A kernel far smaller than this op is bound by its launch, not by memory: it says nothing here.
        if (const double kind = profiled_kind_efficiency(op.kind, Precision::fp32, op.bytes / kSmallerKernelFactor);
            kind > 0)
            return kind;
        const bool optimizer = op.kind == "adamw_step" || op.kind == "sgd_step";
        if (optimizer && calibration.optimizer_memory_efficiency > 0) return calibration.optimizer_memory_efficiency;
        if (const double hit = l2_hit_fraction(op); hit > 0)
            return 1.0 / (hit / hw.l2_copy_gbps.value + (1 - hit) / memory_gbps()) / hw.peak.mem_bw_gbps;
    }
    return memory_gbps() / hw.peak.mem_bw_gbps;
}

double CostModel::input_ceiling(const TrainConfig& cfg) const {
    if (!real_input || cfg.model != "resnet") return 0;
    return hw.input_images_per_s.value;
}

CostModel::OpTime CostModel::op_time(const TracedOp& op, Precision precision) const {
    OpTime t;
    t.ms = op.bytes / (hw.peak.mem_bw_gbps * memory_fraction(op) * 1e9) * 1e3;
    if (op.tensor_core && op.flops > 0) {
        const double peak = peak_tflops(precision);
        SB_REQUIRE(peak > 0, fmt::format("{} has no {} rate", hw.peak.name, precision_name(precision)));
        const double compute_ms = op.flops / (peak * 1e12 * gemm_efficiency(op, precision)) * 1e3;
        if (compute_ms > t.ms) t = {compute_ms, false};
    }
    t.ms += hw.kernel_gap_us.value * 1e-3;
    t.ms *= 1.0 + hw.compute_error_pct.value / 100.0;  // the model's own error on this GPU (0 at the central value)
    return t;
}

double CostModel::ring_busbw_gbps(int g) const {
    if (calibration.ring_busbw_gbps > 0) return calibration.ring_busbw_gbps;
    if (hw.link == LinkClass::nvlink) {
        const double ring = hw.link_gbps.value * hw.link_efficiency.value;
        // NCCL's NVLS: the ring's busbw up to 4 GPUs, then rising to nvls_busbw_gbps at 8 (NVIDIA/nccl#1455:
        // 365-370 GB/s at 2-4 H100s, 420, 440, 460 and 480 at 5-8).
        if (hw.nvls_busbw_gbps.value <= ring || g <= 4) return ring;
        return ring + (hw.nvls_busbw_gbps.value - ring) * std::min(g - 4, 4) / 4.0;
    }
    // A ring all-reduce at busbw B moves B into and out of every GPU. Over PCIe each GPU's link
    // carries it at the link's efficiency.
    double busbw = pcie_gbps(static_cast<int>(hw.pcie_gen.value), static_cast<int>(hw.pcie_lanes.value)) *
                   hw.link_efficiency.value;
    if (hw.link == LinkClass::host_staged) {
        // Every hop is a copy to host memory (device to host) and one from it (host to device).
        // GPUs under one switch share its uplink for both; host memory takes a write and a read
        // of every GPU's B at once: 2 g B at most its bandwidth.
        busbw /= std::min<double>(hw.gpus_per_switch.value, std::max(g, 1));
        busbw = std::min(busbw, hw.host_mem_bw_gbps.value / (2.0 * std::max(g, 1)));
        // What host memory serves staged copies at is far below its bandwidth and shared the same way, so
        // the ring slows as GPUs join it (node.staged_host_gbps; 0: unbounded).
        if (hw.staged_host_gbps.value > 0) busbw = std::min(busbw, hw.staged_host_gbps.value / (2.0 * std::max(g, 1)));
    }
    // A ring over GPUs of both sockets (they fill socket 0 first) crosses the link between them.
    const double per_socket = hw.gpus_per_node.value / hw.sockets.value;
    if (hw.sockets.value > 1 && g > per_socket) busbw = std::min(busbw, hw.inter_socket_gbps.value);
    return busbw;
}

double CostModel::all_reduce_ms(double bytes, int g, int nodes) const {
    SB_REQUIRE(g >= 1 && nodes >= 1, "all_reduce_ms: positive sizes");
    // The call's fixed cost: its launch and the smallest kernel (measured where calibrated).
    const double alpha_us = calibration.collective_alpha_us >= 0 ? calibration.collective_alpha_us : hw.bucket_launch_us.value;
    double us = 0;  // the transfer; the call's fixed cost and the memory bound below
    if (g > 1) {
        // One node: ring all-reduce, 2(g-1) steps. Several: only its reduce-scatter and
        // all-gather run in the node (the same 2(g-1) steps, the same bytes per GPU).
        us += 2.0 * (g - 1) * hw.link_latency_us.value + 2.0 * (g - 1) / g * bytes / (ring_busbw_gbps(g) * 1e9) * 1e6;
    }
    if (nodes > 1) {
        SB_REQUIRE(hw.has_network(), "all_reduce_ms: multi-node needs a network");
        // Each GPU's 1/g of the data crosses the network on its share of the node's NICs.
        const double per_gpu = hw.nic_gbps.value * hw.nics_per_node.value / g * hw.network_efficiency.value;
        const double part = bytes / g;
        const double ring = 2.0 * (nodes - 1) * hw.network_latency_us.value +
                            2.0 * (nodes - 1) / nodes * part / (per_gpu * 1e9) * 1e6;
        // Double binary tree: log depth up and down, each byte sent up and down once.
        const double tree = 2.0 * std::ceil(std::log2(nodes)) * hw.network_latency_us.value +
                            2.0 * part / (per_gpu * 1e9) * 1e6;
        us += std::min(ring, tree);  // NCCL picks the faster algorithm per size
    }
    // No faster than its own reads and writes of device memory (one GPU: NCCL's reduce kernel, nothing else).
    const double memory_us = collective_memory_bytes(Collective::all_reduce, bytes, g * nodes) / (memory_gbps() * 1e9) * 1e6;
    return (alpha_us + std::max(us, memory_us)) * 1e-3;
}

double CostModel::all_reduce_busbw_gbps(double bytes, int g, int nodes) const {
    const int n = g * nodes;
    return bytes / (all_reduce_ms(bytes, g, nodes) * 1e-3) / 1e9 * 2.0 * (n - 1) / n;
}

double CostModel::ring_half_ms(double bytes, int g, int nodes, bool copies_on_one_rank) const {
    SB_REQUIRE(g >= 1 && nodes >= 1, "ring_half_ms: positive sizes");
    const double alpha_us = calibration.collective_alpha_us >= 0 ? calibration.collective_alpha_us : hw.bucket_launch_us.value;
    double us = 0;  // the transfer; the call's fixed cost and the memory bound below
    // Half the all-reduce's ring: (g-1) steps and (g-1)/g of the bytes through each GPU's link.
    if (g > 1) us += (g - 1) * hw.link_latency_us.value + (g - 1.0) / g * bytes / (ring_busbw_gbps(g) * 1e9) * 1e6;
    if (nodes > 1) {
        SB_REQUIRE(hw.has_network(), "ring_half_ms: multi-node needs a network");
        // Each GPU's 1/g of the data around the ring of nodes, half the all-reduce's ring (a tree
        // is an all-reduce algorithm, not one of these).
        const double per_gpu = hw.nic_gbps.value * hw.nics_per_node.value / g * hw.network_efficiency.value;
        us += (nodes - 1) * hw.network_latency_us.value + (nodes - 1.0) / nodes * (bytes / g) / (per_gpu * 1e9) * 1e6;
    }
    // No faster than its own reads and writes of device memory; one GPU's in-place all-gather has none.
    const bool moves = g * nodes > 1 || copies_on_one_rank;
    const double memory_us =
        moves ? collective_memory_bytes(Collective::reduce_scatter, bytes, g * nodes) / (memory_gbps() * 1e9) * 1e6 : 0.0;
    return (alpha_us + std::max(us, memory_us)) * 1e-3;
}

double CostModel::collective_ms(Collective kind, double bytes, int g, int nodes) const {
    switch (kind) {
        case Collective::all_reduce: return all_reduce_ms(bytes, g, nodes);
        case Collective::reduce_scatter: return ring_half_ms(bytes, g, nodes, true);
        case Collective::all_gather: return ring_half_ms(bytes, g, nodes, false);
    }
    return 0;
}

double CostModel::collective_memory_bytes(Collective kind, double bytes, int n) const {
    // Bytes each GPU sends and receives: 2(n-1)/n of the buffer for an all-reduce, (n-1)/n for a
    // reduce-scatter or all-gather, each read from or written to its memory once; one rank reads and
    // writes the buffer once.
    const double ring = kind == Collective::all_reduce ? 2.0 : 1.0;
    const double crossing = n > 1 ? ring * (n - 1) / n * bytes : bytes;
    return 2.0 * crossing;
}

double CostModel::overlapped_compute_rate(Collective kind, double bytes, double comm_ms, int g, int nodes,
                                          bool memory_bound) const {
    const double memory_share =
        std::min(1.0, collective_memory_bytes(kind, bytes, g * nodes) / (comm_ms * 1e-3) / (memory_gbps() * 1e9));
    const double sm_share = std::min(1.0, hw.comm_sms.value / hw.sm_count.value);
    const double beside = hw.link == LinkClass::host_staged && g > 1 ? hw.staged_overlap.value : 1.0;
    return beside * (1.0 - (memory_bound ? memory_share : sm_share));
}

}  // namespace sb
