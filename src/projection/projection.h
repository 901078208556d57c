// The projection model (DESIGN: Projection): how a workload would run on hardware that is
// not here. Three parts, each testable alone:
//  - the trace: the real model code run once on TraceOps, with the runner's own Bucketer
//    and, sharded, its ShardedState (a recording communicator), giving the op list of one
//    step and where each collective (a bucket's all-reduce, or its reduce-scatter and
//    all-gather) is issued and waited for;
//  - the cost model: each op's time from a roofline (FLOPs against the peak times a GEMM
//    efficiency that depends on the shape, bytes against memory bandwidth), each collective
//    from an alpha-beta model per link class and algorithm;
//  - the schedule: the collectives replayed against the ops on one comm stream, as the
//    runner issues them, giving compute, exposed communication, optimizer and step time.
// Calibration replaces profile figures by ones fitted from `gemm`, `comm`, one-GPU `train`
// and `op_profile` records of the same GPU.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/trace_ops.h"
#include "src/core/config.h"
#include "src/core/rank_memory.h"
#include "src/projection/hardware.h"
#include "src/projection/op_profile.h"

namespace sb {

// ---- the trace of one training step
// The collectives a step issues: DDP's all-reduce per bucket, or (sharded) the reduce-scatter of
// the gradients per bucket and the all-gather of the updated parameters per bucket.
enum class Collective { all_reduce, reduce_scatter, all_gather };
const char* collective_name(Collective c);  // "all-reduce", "reduce-scatter", "all-gather"
struct TracedCollective {
    Collective kind = Collective::all_reduce;
    size_t issued_after = 0;  // ops of the step issued before it (it waits for them)
    size_t waited_at = 0;     // ops issued before the step waits for it (the next op waits)
    double bytes = 0;         // nccl-tests' size: the whole buffer in the comm dtype (for a
                              // reduce-scatter or all-gather every rank's slice)
};

struct StepTrace {
    std::string model;
    size_t num_params = 0;
    double flops_per_sample = 0;
    int local_batch = 0;
    int world_size = 1;  // the ranks the step was traced for (a sharded step's slices depend on it)
    Precision precision = Precision::fp32;
    ShardingMode sharding = ShardingMode::none;
    std::vector<TracedOp> ops;  // the whole step in issue order
    size_t backward_end = 0;    // ops [0, backward_end): forward and backward
    size_t optimizer_begin = 0; // ops [backward_end, optimizer_begin): after the bucket waits
    std::vector<TracedCollective> collectives;  // issue order
    std::vector<int> gradient_order;            // parameter indices in the order backward made them final
    double gradient_bytes = 0;                  // the gradients the buckets hold, in the comm dtype (unpadded)
    size_t buckets = 0;
    size_t shard_elements = 0;  // sharded: the elements each rank owns (every bucket's slice)
    // Of one kind of collective: the bytes of every call together.
    double collective_bytes(Collective kind) const;
    // What one rank holds, predicted as `train` predicts it before a run (src/core/rank_memory.h).
    RankMemory memory;
};

// Mirrors DataParallelTrainer::issue_step for `local_batch` rows on rank 0 of `world_size` ranks
// (whose count matters only to a sharded step: its slices and their padding).
// `limits`: the GPU traced for, which picks limit-dependent kernels' variants.
StepTrace trace_step(const TrainConfig& cfg, int local_batch,
                     const DeviceLimits& limits = TraceOps::default_trace_limits(), int world_size = 1);
// The limits of a profile's GPU (its architecture's table row); the trace's default when the
// architecture is not one scalebench claims.
DeviceLimits profile_limits(const HardwareProfile& hw);

// The GPU memory a rank's step needs beyond what the trace allocated: cuBLASLt's workspace
// (models/cuda/cuda_ops.cu) and the runtime's own (CUDA context, cuBLAS handles, the backend's
// scratch): 1176-1306 MiB besides the operands in the H200's `gemm` telemetry
// (results/h200-one-gpu/gemm/gemm.jsonl), the high end taken, assumed the same on every GPU.
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;  // profiles give memory_gb in GiB, as CUDA reports it
constexpr double kGemmWorkspaceBytes = 32.0 * 1024 * 1024;
constexpr double kRuntimeReserveBytes = 1306.0 * 1024 * 1024;
// A rank's footprint on its GPU: the per-rank prediction `train` refuses a run by
// (predict_rank_memory) and the workspace and reserve above.
double footprint_bytes(const RankMemory& memory);
double footprint_bytes(const StepTrace& trace);
// The largest local batch whose footprint fits `memory_gb` GiB at `world_size` ranks in the
// config's sharding mode (0 when not even one row fits).
int max_fitting_batch(const TrainConfig& cfg, double memory_gb, int world_size = 1);

// The workload a `train` record ran, from its "config" object (validated like a file), with the
// convolution engine that ran (the record's top-level conv_engine) in place of the config's "auto".
TrainConfig config_of_record(const nlohmann::json& record, const std::string& where);
// The convolution engine a ResNet record ran: its top-level conv_engine (`auto` resolved on the
// runner's backend); a record without it predates the cuDNN engine and ran im2col.
std::string conv_engine_of_record(const nlohmann::json& record);

// ---- calibration from result records
struct Calibration {
    std::vector<std::string> files;
    // GEMM efficiency at large shapes per precision ("fp32", "tf32", "bf16", "fp16"),
    // as implied by measured records through the shape model; < 0 when not measured.
    double gemm_base[4] = {-1, -1, -1, -1};
    // Measured GEMMs of the GPU: an op of exactly this shape and precision takes the
    // measured efficiency instead of the shape model's.
    struct MeasuredGemm {
        int precision = 0;
        int64_t m = 0, n = 0, k = 0;
        double fraction = 0;
    };
    std::vector<MeasuredGemm> gemms;
    std::vector<std::string> notes;   // what was used, and from where
    double memory_efficiency = -1;    // from a single-rank out-of-place all-reduce (a device copy)
    // The optimizer step's fraction of memory bandwidth, from one-GPU `train` records of the
    // GPU (their optimizer_ms against the traced step's bytes); < 0 when none was given.
    double optimizer_memory_efficiency = -1;
    // Ops timed on the GPU (`train --profile-ops`), with the bytes the current trace of their
    // run gives them: CostModel::op_ms gives a traced op the efficiency of the nearest of them
    // (see there).
    std::vector<ProfiledOp> profiled_ops;
    double collective_alpha_us = -1;  // fixed cost of one all-reduce call
    double ring_busbw_gbps = -1;      // large-message busbw of the intra-node fabric, when n > 1 was measured
    int ring_busbw_world = 0;
};

// Reads `scalebench gemm`, `comm`, one-GPU `train` and `op_profile` records; keeps those of
// hw's GPU.
Calibration calibrate(const HardwareProfile& hw, const std::vector<std::string>& files);

// ---- cost model
struct CostModel {
    HardwareProfile hw;
    Calibration calibration;
    // The step is fed real data through the host's loader (project --input real, a scenario's
    // `input: real`): an image workload's samples/s is capped at the host's node.input_images_per_s.
    // Synthetic (false): the data is on the device, as scalebench's runner has it.
    bool real_input = false;
    explicit CostModel(HardwareProfile profile, Calibration cal = {}, bool real = false)
        : hw(std::move(profile)), calibration(std::move(cal)), real_input(real) {}
    // The host's input ceiling for `cfg` (samples/s per node); 0 when none applies: synthetic input,
    // a workload that is not an image model, or a host with none published.
    double input_ceiling(const TrainConfig& cfg) const;

    // Wave quantization (128x128 tiles over the SMs, K split over idle SMs as cuBLAS's split-K)
    // times the K pipeline fill k / (k + 128) per split.
    double gemm_shape_factor(int64_t m, int64_t n, int64_t k, int64_t batch) const;
    double gemm_shape_factor(const TracedOp& op) const { return gemm_shape_factor(op.m, op.n, op.k, op.batch); }
    // Fraction of peak of a tensor-core op (a GEMM, attention's products). With profiled ops:
    // the nearest profiled op of its kind within kCloseFactor (see closest_profiled), carried
    // by the shape model's ratio; else, for attention, its kind's measured rate over the
    // shape model. Otherwise a `gemm` record of the same shape, or the shape model over the
    // large-shape efficiency (gemm records, else the profile).
    double gemm_efficiency(const TracedOp& op, Precision precision) const;
    // Fraction of memory bandwidth a memory-bound op reaches: that of the nearest profiled op
    // of its kind, else its kind's over every profiled shape (bytes over time), else the
    // optimizer's from train records (AdamW, SGD), else a device copy's (memory_efficiency).
    // Tensor-core ops: a device copy's (their measured time goes through gemm_efficiency).
    double memory_fraction(const TracedOp& op) const;
    double peak_tflops(Precision precision) const;  // the datasheet's, at the profile's clock_factor
    // The datasheet's rate at the clock the profile's GEMM rates were published at: their
    // efficiency is against it, applied to peak_tflops.
    double benchmarked_tflops(Precision precision) const;
    // The profile's large-shape GEMM efficiency of `precision`: the median over its published
    // rates of (rate / peak) / the shape factor of their shape.
    double profile_gemm_base(Precision precision) const;
    // The highest fraction of peak a GEMM may reach: 1, or more where the GPU's published rates
    // are above its datasheet peak (a GeForce card boosting past its rated clock).
    double gemm_fraction_cap(Precision precision) const;
    double memory_gbps() const;  // achievable by a device copy larger than L2
    // The share of a memory-bound op's traffic L2 holds (its operands were just written by the
    // ops before it): all of it when its bytes fit in L2, else L2 / bytes; 0 where the profile
    // gives no L2 copy rate. That share moves at the L2 rate, the rest at a device copy's.
    double l2_hit_fraction(const TracedOp& op) const;
    struct OpTime {
        double ms = 0;
        bool memory_bound = true;  // its bytes term decided the time
    };
    OpTime op_time(const TracedOp& op, Precision precision) const;
    double op_ms(const TracedOp& op, Precision precision) const { return op_time(op, precision).ms; }

    // A profiled op's efficiency from its time less the kernel gap (op_ms adds the gap
    // back): memory-bound ops as a fraction of memory bandwidth, tensor-core ops of peak.
    double measured_efficiency(const ProfiledOp& p) const;
    // Profiled shapes are carried to ops whose every dimension (m, n, k, batch) is within
    // this factor of theirs; beyond, the kernel may be another and the shape model decides.
    static constexpr double kCloseFactor = 4.0;
    // The profiled op of the same kind, variant, dtype, precision (and GEMM transposes)
    // nearest to `op` (sum of |log ratios| of the dimensions) within kCloseFactor; nullptr if none.
    const ProfiledOp* closest_profiled(const TracedOp& op, Precision precision) const;
    // Over every profiled op of `kind` (tensor-core kinds: of `precision`; memory-bound ones that
    // moved at least min_bytes), per step: for a memory-bound kind its bytes over its time, as a
    // fraction of memory bandwidth; for a tensor-core kind the large-shape efficiency its FLOPs
    // imply through the shape model. < 0 when none was profiled.
    double profiled_kind_efficiency(const std::string& kind, Precision precision, double min_bytes = 0) const;
    // A memory-bound op takes its kind's figure only from profiled ops of at least 1/16 of its
    // bytes (kCloseFactor squared, two dimensions at the limit): on the H200 the cross-entropy of
    // a ResNet's 256 x 1000 logits moves 96 GB/s, BERT's over 32768 x 30522 logits 5.9 TB/s (by
    // the trace's byte count).
    static constexpr double kSmallerKernelFactor = kCloseFactor * kCloseFactor;
    // One all-reduce of `bytes` over `gpus_per_node` x `nodes` GPUs (ms): the call's fixed cost plus
    // its transfer, and at least its device memory traffic (collective_memory_bytes) at the copy rate.
    // On one GPU that traffic is all: NCCL's one-rank path runs its reduce kernel for the runner's
    // ncclAvg (a scale by 1/1), in place or not.
    double all_reduce_ms(double bytes, int gpus_per_node, int nodes) const;
    double ring_busbw_gbps(int gpus) const;  // intra-node ring of `gpus`, large messages
    // nccl-tests' busbw of one all-reduce of `bytes`: bytes / time x 2(n-1)/n over all n GPUs.
    double all_reduce_busbw_gbps(double bytes, int gpus_per_node, int nodes) const;

    // A ring reduce-scatter or all-gather of `bytes` (nccl-tests' size: the whole buffer): half the
    // all-reduce's ring, (n-1) steps of link latency and (n-1)/n of the bytes at the same busbw
    // (ring_busbw_gbps), and across nodes half its ring between them. On one GPU the out-of-place
    // reduce-scatter copies its bytes once (`copies_on_one_rank`); the in-place all-gather moves none.
    // Like the all-reduce, it lasts at least its device memory traffic at the copy rate.
    double ring_half_ms(double bytes, int gpus_per_node, int nodes, bool copies_on_one_rank) const;
    // One collective of the step (ms): all_reduce_ms or ring_half_ms.
    double collective_ms(Collective kind, double bytes, int gpus_per_node, int nodes) const;

    // A collective's device memory traffic on each GPU (bytes): a read or a write of every byte it sends
    // or receives, 2 x 2(n-1)/n of the buffer for an all-reduce, 2 x (n-1)/n for a reduce-scatter or
    // all-gather; on one GPU a read and a write of the buffer. A collective cannot outrun it: the
    // N-GPU ring and the one-GPU reduce kernel are bounded by the same memory rate.
    double collective_memory_bytes(Collective kind, double bytes, int n) const;

    // What a collective takes from the compute it overlaps: the fraction of the SMs (NCCL's
    // channels, comm_sms of sm_count) and of device memory bandwidth (collective_memory_bytes over
    // its time, against a device copy's rate). On a
    // host_staged node compute runs beside it only staged_overlap of the time. The rate (0-1) a
    // compute op progresses at while the collective runs.
    double overlapped_compute_rate(Collective kind, double bytes, double comm_ms, int gpus_per_node, int nodes,
                                   bool memory_bound) const;
};

struct ProjectedStep {
    int world_size = 0, nodes = 1;
    double compute_ms = 0, exposed_comm_ms = 0, optimizer_ms = 0, step_ms = 0;
    double allreduce_ms = 0;  // every bucket back to back, as the runner's allreduce_ms
    // Sharded: every bucket's reduce-scatter, and every bucket's all-gather, back to back (the record's
    // sharding.reduce_scatter.ms and sharding.all_gather.ms).
    double reduce_scatter_ms = 0, all_gather_ms = 0;
    double straggler_ms = 0;  // the wait for the slowest of the ranks (in exposed_comm_ms and step_ms)
    double framework_ms = 0;  // the framework's own cost per step at N > 1 (in exposed_comm_ms and step_ms)
    double input_wait_ms = 0; // real input: the wait for the host's loader beyond the GPU step (in step_ms)
};

// The middle value (the mean of the two middle ones for an even count).
double median_value(std::vector<double> v);

// The expected maximum of n independent standard normal draws (0 for n = 1; 1.42 for n = 8).
double expected_max_of_normals(int n);

// Replays the step's collectives against its ops as the runner issues and waits for them, then charges the slowest of the world's ranks
// and, at N > 1, the framework's cost per step (node.framework_step_ms).
ProjectedStep schedule_step(const StepTrace& trace, const CostModel& model, int gpus_per_node, int nodes);

// What the model assumes, for the records and the README.
std::vector<std::string> projection_assumptions(const CostModel& model);

}  // namespace sb
