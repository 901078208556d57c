#include "src/commands/runner.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "collectives/mpi_communicator.h"
#include "src/commands/stragglers.h"
#include "src/system/backend.h"
#include "src/system/environment.h"
#include "collectives/deadline.h"
#include "base/errors.h"
#include "base/numbers.h"
#include "src/core/results.h"
#include "src/core/stats.h"
#include "src/core/workload.h"

namespace sb {

namespace {
// Marker slots of one step (Ops::record_marker).
enum Marker { kStepStart = 0, kBackwardEnd = 1, kCommWaited = 2, kOptimizerEnd = 3, kCommStart = 4, kCommEnd = 5 };

// GradScaler's defaults (torch.amp): start at 2^16, halve on overflow, double after 2000 good steps.
constexpr float kInitialLossScale = 65536.0f;
constexpr int kLossScaleGrowthInterval = 2000;
}  // namespace

TestHook parse_test_hook(const char* variable, const char* text, double max_value) {
    if (!text || !*text) return {};
    const std::string value = text;
    const size_t colon = value.find(':');
    int64_t rank = 0;
    double number = 0;
    // Both parts through the one number parser (base/numbers.h), as every number typed is read.
    if (colon != std::string::npos &&
        parse_integer(value.substr(0, colon), IntRange{0, (1 << 24) - 1}, rank).empty() &&
        parse_real(value.substr(colon + 1), RealRange{0, false, max_value, false}, number).empty())
        return {static_cast<int>(rank), number};
    throw UserError(fmt::format("{}='{}': expected RANK:NUMBER (a rank, then 0 to {}), e.g. 1:20", variable, value,
                                max_value));
}

const TestHooks& test_hooks() {
    static const TestHooks hooks{
        parse_test_hook("SCALEBENCH_TEST_DELAY_RANK", std::getenv("SCALEBENCH_TEST_DELAY_RANK"), 60000),
        parse_test_hook("SCALEBENCH_TEST_CUDA_FAULT", std::getenv("SCALEBENCH_TEST_CUDA_FAULT"), 1e9)};
    return hooks;
}

DataParallelTrainer::DataParallelTrainer(const TrainConfig& cfg, Ops& ops, Communicator& comm)
    : cfg_(cfg), ops_(ops), comm_(comm) {
    local_batch_ = per_rank_batch(cfg, comm.size());
    model_ = create_model(cfg, ops, comm.rank());
    const size_t n = model_->num_params();
    const DType dtype = compute_dtype(ops.precision());

    params_ = DeviceBuffer(ops, n * sizeof(float));
    grads_ = DeviceBuffer(ops, n * sizeof(float));
    if (dtype != DType::f32) weights_ = DeviceBuffer(ops, n * dtype_size(dtype));
    const size_t state_buffers = cfg.optimizer.kind == OptimizerConfig::Kind::adamw ? 2 : 1;
    state_a_ = DeviceBuffer(ops, n * sizeof(float));
    ops.fill(state_a_.tensor(DType::f32, 1, static_cast<int64_t>(n)), 0.0f);
    if (state_buffers == 2) {
        state_b_ = DeviceBuffer(ops, n * sizeof(float));
        ops.fill(state_b_.tensor(DType::f32, 1, static_cast<int64_t>(n)), 0.0f);
    }
    loss_ = DeviceBuffer(ops, sizeof(float));

    // Identical initial weights on every rank: same seed, same portable generator.
    std::vector<float> host(n);
    model_->init_params(host.data(), cfg.seed);
    ops.upload(params_.get(), host.data(), n * sizeof(float));
    if (weights_.get())
        ops.cast(params_.tensor(DType::f32, 1, static_cast<int64_t>(n)), weights_.tensor(dtype, 1, static_cast<int64_t>(n)));

    FlatBuffers flat{params_.as<float>(), weights_.get() ? weights_.get() : params_.get(), grads_.as<float>()};
    model_->bind(flat, local_batch_);

    data_ = create_dataset(cfg, ops, global_batch(), comm.rank(), local_batch_);
    bucketer_ = std::make_unique<Bucketer>(model_->params(), cfg.bucket_mb, comm, grads_.as<float>(), ops,
                                           cfg.grad_dtype);
    if (ops.precision() == Precision::fp16) loss_scale_ = kInitialLossScale;
    use_graphs_ = cfg.cuda_graphs && step_is_host_free() && ops.has_graphs();
}

DataParallelTrainer::~DataParallelTrainer() {
    for (const auto& [slot, captured] : graphs_) ops_.release_graph(captured.graph);
}

bool DataParallelTrainer::step_is_host_free() const {
    // fp16 loss scaling reads the overflow flag on the host; MPI waits on the host.
    return ops_.precision() != Precision::fp16 && ops_.stream() != nullptr;
}

void DataParallelTrainer::issue_gradients(int64_t step) {
    bucketer_->start_step();
    model_->forward_backward(data_->inputs(step), data_->labels(step), loss_.as<float>(), loss_scale_,
                             bucketer_.get());
    ops_.record_marker(kBackwardEnd);
    bucketer_->wait_all();
    ops_.record_marker(kCommWaited);
}

void DataParallelTrainer::issue_step(int64_t step) {
    const size_t n = model_->num_params();
    const DType dtype = compute_dtype(ops_.precision());
    const Tensor weights_copy =
        weights_.get() ? weights_.tensor(dtype, 1, static_cast<int64_t>(n)) : Tensor{};

    // With graphs, the first step runs eagerly (it sizes lazily grown buffers and caches
    // GEMM plans, which a capture must not do); each later step replays the graph of its
    // data batch, captured on first use. The optimizer stays outside: its step count
    // changes every step.
    if (use_graphs_ && step >= 1) {
        const int slot = static_cast<int>(step % cfg_.dataset_batches);
        const void* inputs = data_->inputs(step).data;
        auto it = graphs_.find(slot);
        if (it == graphs_.end()) {
            comm_.mark_arrivals();  // the capture records the buckets' arrival events from the first
            ops_.begin_capture();
            try {
                issue_gradients(step);
            } catch (...) {
                ops_.abandon_capture();  // so the stream reports the original error, not "capturing"
                throw;
            }
            it = graphs_.emplace(slot, CapturedStep{ops_.end_capture(), inputs}).first;
        }
        SB_REQUIRE(it->second.inputs == inputs, "the data batch of a step moved since its graph was captured");
        start_step_clocks();
        ops_.replay(it->second.graph);
        comm_.watch_stream("training step (CUDA graph)");
    } else {
        start_step_clocks();
        issue_gradients(step);
    }
    inject_test_fault(step);
    bool apply = true;
    if (ops_.precision() == Precision::fp16) {
        // Every rank sees the same averaged gradients, so all take the same decision.
        apply = ops_.unscale_and_check(grads_.as<float>(), n, 1.0f / loss_scale_);
        if (!apply) {
            loss_scale_ *= 0.5f;
            good_steps_ = 0;
        } else if (++good_steps_ == kLossScaleGrowthInterval) {
            loss_scale_ *= 2.0f;
            good_steps_ = 0;
        }
    }
    if (apply) {
        ++optimizer_steps_;
        if (cfg_.optimizer.kind == OptimizerConfig::Kind::adamw)
            ops_.adamw_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), state_b_.as<float>(), n,
                            cfg_.optimizer, optimizer_steps_, weights_copy);
        else
            ops_.sgd_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), n, cfg_.optimizer,
                          weights_copy);
    }
    ops_.record_marker(kOptimizerEnd);
}

void DataParallelTrainer::start_step_clocks() {
    ops_.record_marker(kStepStart);
    comm_.mark_arrivals();
    const TestHook& delay = test_hooks().delay_rank;
    if (delay.rank == process_info().world_rank)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay.value));
}

void DataParallelTrainer::inject_test_fault(int64_t step) {
    const TestHook& fault = test_hooks().cuda_fault;
    if (fault.rank < 0) return;
    if (ops_.name() != "cuda")
        throw UserError("SCALEBENCH_TEST_CUDA_FAULT: a CUDA fault needs the cuda backend");
    if (fault.rank != process_info().world_rank || static_cast<double>(step) != fault.value) return;
    fmt::print(stderr, "scalebench: test fault: rank {} writes to an invalid device address in step {}\n", fault.rank,
               step);
    ops_.fill(Tensor{reinterpret_cast<void*>(uintptr_t{8}), DType::f32, 1, 1 << 20}, 0.0f);
}

StepTimes DataParallelTrainer::step_times() {
    StepTimes t;
    t.bucket_starts = comm_.starts_ms(bucketer_->buckets().size());
    t.bucket_arrivals = comm_.arrivals_ms(bucketer_->buckets().size());
    t.step = ops_.elapsed_ms(kStepStart, kOptimizerEnd);
    t.compute = ops_.elapsed_ms(kStepStart, kBackwardEnd);
    t.exposed_comm = ops_.elapsed_ms(kBackwardEnd, kCommWaited);
    t.optimizer = ops_.elapsed_ms(kCommWaited, kOptimizerEnd);
    // A step on NCCL (or at n = 1) makes no MPI call, while ranks outside this sub-world
    // wait at MPI barriers whose deadline pings every rank: answer them once per step.
    serve_side_channel();
    return t;
}

float DataParallelTrainer::last_loss() {
    float loss = 0;
    ops_.download(&loss, loss_.get(), sizeof(float));
    return loss;
}

std::vector<float> DataParallelTrainer::params_host() {
    std::vector<float> host(model_->num_params());
    ops_.download(host.data(), params_.get(), host.size() * sizeof(float));
    return host;
}

void DataParallelTrainer::all_reduce_every_bucket() {
    // Exactly what a step's buckets do (casts included with a 16-bit grad_dtype), but
    // all at once and with no backward to hide behind.
    bucketer_->start_step();
    for (int i = static_cast<int>(model_->params().size()) - 1; i >= 0; --i) bucketer_->gradient_ready(i);
    bucketer_->wait_all();
}

double DataParallelTrainer::time_gradient_allreduce(int iterations) {
    std::vector<double> times;
    for (int it = 0; it < iterations; ++it) {
        comm_.barrier();
        ops_.record_marker(kCommStart);
        all_reduce_every_bucket();
        ops_.record_marker(kCommEnd);
        times.push_back(ops_.elapsed_ms(kCommStart, kCommEnd));
    }
    return percentile(times, 50);
}

uint64_t DataParallelTrainer::params_checksum() {
    return ops_.checksum(params_.get(), model_->num_params() * sizeof(float));
}

void DataParallelTrainer::set_params_host(const std::vector<float>& params) {
    const size_t n = model_->num_params();
    SB_REQUIRE(params.size() == n, fmt::format("{} parameters given, the model has {}", params.size(), n));
    ops_.upload(params_.get(), params.data(), n * sizeof(float));
    if (weights_.get())
        ops_.cast(params_.tensor(DType::f32, 1, static_cast<int64_t>(n)),
                  weights_.tensor(compute_dtype(ops_.precision()), 1, static_cast<int64_t>(n)));
}

void DataParallelTrainer::flip_parameter_bit(size_t index, int bit) {
    std::vector<float> params = params_host();
    SB_REQUIRE(index < params.size() && bit >= 0 && bit < 32,
               fmt::format("parameter {} bit {} of {} parameters", index, bit, params.size()));
    uint32_t word = 0;
    std::memcpy(&word, &params[index], sizeof word);
    word ^= uint32_t{1} << bit;
    std::memcpy(&params[index], &word, sizeof word);
    set_params_host(params);
}

size_t DataParallelTrainer::recheck_gradient_allreduce() {
    const size_t n = model_->num_params();
    std::vector<float> input(n), first(n), second(n);
    ops_.download(input.data(), grads_.get(), n * sizeof(float));
    all_reduce_every_bucket();
    ops_.download(first.data(), grads_.get(), n * sizeof(float));
    ops_.upload(grads_.get(), input.data(), n * sizeof(float));
    all_reduce_every_bucket();
    ops_.download(second.data(), grads_.get(), n * sizeof(float));
    size_t mismatched = 0;
    for (size_t i = 0; i < n; ++i) mismatched += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    return mismatched;
}

namespace {

void print_header(const TrainConfig& cfg, const Ops& ops, size_t params, int world) {
    fmt::print("scalebench train: {} model, {} parameters, backend {}, precision {}, {} scaling, batch {} {}, "
               "{} rank{} launched\n",
               cfg.model, params, ops.name(), precision_name(ops.precision()), scaling_mode_name(cfg.scaling_mode),
               cfg.batch_size, cfg.scaling_mode == ScalingMode::weak ? "per rank" : "global", world,
               world == 1 ? "" : "s");
    if (shared_gpu_enabled()) fmt::print("{}\n", kSharedGpuNote);
    print_scaling_table_columns();
}

}  // namespace

void print_scaling_table_columns() {
    fmt::print("{:>5} {:>12} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", "ranks", "samples/s",
               "per rank", "step ms", "min", "max", "compute", "exp.comm", "optimizer", "busbw", "eff.");
    fmt::print("{:>5} {:>12} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>9} {:>7}\n", "", "", "", "median",
               "", "", "ms", "ms", "ms", "GB/s", "");
    std::fflush(stdout);
}

void print_scaling_table_row(const ScalingRow& r) {
    fmt::print("{:>5} {:>12.1f} {:>11.1f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>10.3f} {:>9.2f} {:>7}\n",
               r.world_size, r.samples_per_s, r.per_rank, r.step.median, r.step.min, r.step.max, r.compute.median,
               r.exposed.median, r.optimizer.median, r.busbw,
               std::isnan(r.efficiency) ? std::string("-") : fmt::format("{:.1f}%", 100.0 * r.efficiency));
    std::fflush(stdout);
}

namespace {

// Whether a person watches rank 0's output: stdout is a terminal, and under a launcher that
// forwards output through a pty of its own (Open MPI does), the launcher's stdout is one too.
// Files, pipes and CI logs get no progress line.
bool output_is_watched() {
    if (!::isatty(STDOUT_FILENO)) return false;
    if (!std::getenv("OMPI_COMM_WORLD_SIZE") && !std::getenv("PMIX_RANK")) return true;
    char target[256] = {};
    const std::string link = "/proc/" + std::to_string(::getppid()) + "/fd/1";
    const ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
    const std::string path(target, n > 0 ? static_cast<size_t>(n) : 0);
    return path.rfind("/dev/pts/", 0) == 0 || path.rfind("/dev/tty", 0) == 0;
}

// Rank 0's progress through one world size's steps, rewritten in place at most 4 times a
// second: "n = 4: step 120/203, 45.2 steps/s, 2s left"; cleared before the table row.
class ProgressLine {
public:
    ProgressLine(bool shown, int world_size, int total_steps)
        : shown_(shown), world_size_(world_size), total_(total_steps), start_(std::chrono::steady_clock::now()) {}
    ~ProgressLine() { clear(); }

    void step_done(int done) {
        if (!shown_) return;
        const auto now = std::chrono::steady_clock::now();
        if (now - last_ < std::chrono::milliseconds(250)) return;
        last_ = now;
        const double elapsed = std::chrono::duration<double>(now - start_).count();
        const double rate = done / std::max(elapsed, 1e-9);
        const std::string line = fmt::format("n = {}: step {}/{}, {:.1f} steps/s, {:.0f}s left", world_size_, done,
                                             total_, rate, (total_ - done) / std::max(rate, 1e-9));
        fmt::print("\r{:<{}}", line, width_);
        width_ = std::max(width_, line.size());
        std::fflush(stdout);
    }
    void clear() {
        if (!shown_ || width_ == 0) return;
        fmt::print("\r{:<{}}\r", "", width_);
        std::fflush(stdout);
        width_ = 0;
    }

private:
    bool shown_;
    int world_size_, total_;
    std::chrono::steady_clock::time_point start_, last_{};
    size_t width_ = 0;
};

}  // namespace

namespace {

// Collective over `comm`: the phases of one measured step, which add up to it (per-phase
// medians need not): each step's slowest rank, and of those steps the median one (the lower
// middle for an even count). `times` holds 4 per step: step, compute, exposed, optimizer.
// Complete on rank 0 of `comm`.
nlohmann::json median_step_phases(const std::vector<double>& times, MPI_Comm comm) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    std::vector<double> all(rank == 0 ? times.size() * static_cast<size_t>(size) : 0);
    SB_CHECK_MPI(MPI_Gather(times.data(), static_cast<int>(times.size()), MPI_DOUBLE, all.data(),
                            static_cast<int>(times.size()), MPI_DOUBLE, 0, comm));
    const size_t steps = times.size() / 4;
    if (rank != 0 || steps == 0) return nullptr;
    std::vector<std::pair<double, size_t>> slowest;  // (step time, index into all) per step
    for (size_t s = 0; s < steps; ++s) {
        size_t at = 4 * s;
        for (int r = 1; r < size; ++r) {
            const size_t other = static_cast<size_t>(r) * times.size() + 4 * s;
            if (all[other] > all[at]) at = other;
        }
        slowest.emplace_back(all[at], at);
    }
    std::nth_element(slowest.begin(), slowest.begin() + (steps - 1) / 2, slowest.end());
    const size_t at = slowest[(steps - 1) / 2].second;
    return {{"step_ms", all[at]}, {"compute_ms", all[at + 1]}, {"exposed_comm_ms", all[at + 2]},
            {"optimizer_ms", all[at + 3]}, {"rank", at / times.size()}, {"step", (at % times.size()) / 4}};
}

}  // namespace

std::string utc_timestamp() {
    std::time_t now = std::time(nullptr);
    char text[32];
    std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
    return text;
}

namespace {

// What one world size's steps measured on this rank.
struct LocalSamples {
    std::vector<double> times;  // 4 per measured step: step, compute, exposed, optimizer
    std::vector<double> arrivals;  // buckets per measured step: each bucket's arrival (NaN: not measured)
    float initial_loss = 0, final_loss = 0;
    int first_nonfinite_step = -1;     // the first step (0-based, warm-up included) whose loss is inf or NaN
    nlohmann::json telemetry;          // NVML summary over the measured steps (null on the CPU)
    std::vector<double> device_times;  // the steps again, issued with the stream held
};

// The warm-up and measured steps (telemetry over the measured ones), then, where a step
// issues no host waits, the same steps with the stream held while they are issued: the device
// time of a step with no host launch gaps (the difference is host overhead).
LocalSamples run_steps(DataParallelTrainer& trainer, const TrainConfig& cfg, Ops& ops, ProgressLine& progress) {
    LocalSamples local;
    std::unique_ptr<Telemetry> telemetry;
    for (int s = 0; s < cfg.warmup + cfg.steps; ++s) {
        if (s == cfg.warmup) telemetry = start_telemetry(ops);
        StepTimes t = trainer.step(s);
        // After the step's timing is read (the step has ended): not part of the measured time.
        const float loss = trainer.last_loss();
        if (s == 0) local.initial_loss = loss;
        if (local.first_nonfinite_step < 0 && !std::isfinite(loss)) local.first_nonfinite_step = s;
        if (s >= cfg.warmup) {
            local.times.insert(local.times.end(), {t.step, t.compute, t.exposed_comm, t.optimizer});
            t.bucket_arrivals.resize(trainer.bucketer().buckets().size(), NAN);
            local.arrivals.insert(local.arrivals.end(), t.bucket_arrivals.begin(), t.bucket_arrivals.end());
        }
        progress.step_done(s + 1);
    }
    progress.clear();
    local.final_loss = trainer.last_loss();
    if (telemetry) local.telemetry = telemetry->stop();
    if (trainer.step_is_host_free()) {
        const int gated_steps = std::max(3, std::min(cfg.steps, 10));
        for (int s = 0; s < gated_steps; ++s) {
            SB_REQUIRE(ops.hold_stream(), "backend cannot hold its stream");
            trainer.issue_step(cfg.warmup + cfg.steps + s);
            ops.release_stream();
            local.device_times.push_back(trainer.step_times().step);
        }
    }
    return local;
}

// One world size's figures over its ranks; complete on rank 0 of the sub-world.
struct SizeFigures {
    std::vector<double> phase[4];  // per measured step, the slowest rank's: step, compute, exposed, optimizer
    nlohmann::json median_step;
    float mean_losses[2] = {0, 0};  // first step, last measured step
    int first_nonfinite_step = -1;  // the earliest over the ranks, or -1: the loss stayed finite
    std::vector<uint64_t> checksums;  // every rank's parameter checksum
    long long recheck_mismatched = 0;
    double allreduce_ms = 0, device_step_ms = NAN;  // slowest rank
    std::vector<nlohmann::json> telemetry_by_rank;
    nlohmann::json straggler_check;  // stragglers.h
};

// Collective over `sub` (n ranks): reduces the samples and runs the checks (the replica
// checksums always, the all-reduce recheck on demand) and the gradient all-reduce timing.
SizeFigures reduce_figures(DataParallelTrainer& trainer, const LocalSamples& local, MPI_Comm sub, int n,
                           const SweepChecks& checks, const nlohmann::json& environment) {
    SizeFigures f;
    // Each step's figure is the slowest rank's (the step ends when the last rank is done).
    std::vector<double> slowest(local.times.size());
    SB_CHECK_MPI(MPI_Allreduce(local.times.data(), slowest.data(), static_cast<int>(local.times.size()), MPI_DOUBLE,
                               MPI_MAX, sub));
    for (size_t i = 0; i < slowest.size(); ++i) f.phase[i % 4].push_back(slowest[i]);
    f.median_step = median_step_phases(local.times, sub);
    std::vector<double> compute;
    for (size_t i = 1; i < local.times.size(); i += 4) compute.push_back(local.times[i]);
    f.straggler_check =
        gather_straggler_check(compute, local.arrivals, trainer.bucketer().buckets().size(), environment, sub);

    float losses[2] = {local.initial_loss, local.final_loss};
    SB_CHECK_MPI(MPI_Allreduce(losses, f.mean_losses, 2, MPI_FLOAT, MPI_SUM, sub));
    for (float& l : f.mean_losses) l /= static_cast<float>(n);
    int mine = local.first_nonfinite_step < 0 ? INT_MAX : local.first_nonfinite_step, first = INT_MAX;
    SB_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, sub));
    f.first_nonfinite_step = first == INT_MAX ? -1 : first;

    // Replica check: data parallelism keeps every rank's parameters bitwise identical.
    const uint64_t checksum = trainer.params_checksum();
    f.checksums.resize(static_cast<size_t>(n));
    SB_CHECK_MPI(MPI_Gather(&checksum, 1, MPI_UINT64_T, f.checksums.data(), 1, MPI_UINT64_T, 0, sub));

    // On demand: the same all-reduce twice from identical inputs must give the same bits.
    if (checks.recheck_allreduce) {
        const long long mine = static_cast<long long>(trainer.recheck_gradient_allreduce());
        SB_CHECK_MPI(MPI_Allreduce(&mine, &f.recheck_mismatched, 1, MPI_LONG_LONG, MPI_SUM, sub));
    }
    const double allreduce_ms = trainer.time_gradient_allreduce(5);
    SB_CHECK_MPI(MPI_Allreduce(&allreduce_ms, &f.allreduce_ms, 1, MPI_DOUBLE, MPI_MAX, sub));
    const double device_step_ms = local.device_times.empty() ? NAN : percentile(local.device_times, 50);
    SB_CHECK_MPI(MPI_Allreduce(&device_step_ms, &f.device_step_ms, 1, MPI_DOUBLE, MPI_MAX, sub));
    f.telemetry_by_rank = gather_json(local.telemetry, sub);
    return f;
}

// Rank 0: the ranks whose parameters differ from rank 0's ({rank, host}), each also printed.
nlohmann::json mismatched_replicas(const SizeFigures& f, const std::vector<std::string>& hosts) {
    nlohmann::json mismatched = nlohmann::json::array();
    for (size_t r = 0; r < f.checksums.size(); ++r) {
        if (f.checksums[r] == f.checksums[0]) continue;
        const std::string host = r < hosts.size() ? hosts[r] : "?";
        fmt::print(stderr, "replica check FAILED: rank {} on {} holds parameters that differ from rank 0\n", r, host);
        mismatched.push_back({{"rank", r}, {"host", host}});
    }
    return mismatched;
}

nlohmann::json or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

// Rank 0: the record of world size `row.world_size` (results/SCHEMA.md, train).
nlohmann::json train_record(const TrainConfig& cfg, Ops& ops, const DataParallelTrainer& trainer,
                            const SizeFigures& f, const ScalingRow& row, double samples_per_s_at_1, int launched,
                            const nlohmann::json& mismatched, const SweepChecks& checks,
                            const nlohmann::json& environment) {
    const int n = row.world_size;
    const int global_batch = trainer.global_batch();
    const double gradient_bytes =
        static_cast<double>(trainer.bucketer().total_elements() * dtype_size(trainer.bucketer().comm_dtype()));
    const double algbw = gradient_bytes / (f.allreduce_ms / 1000.0) / 1e9;
    const double flops_per_step = trainer.model().flops_per_sample() * global_batch;
    const double tflops = flops_per_step / (row.step.median / 1000.0) / 1e12;
    const std::optional<double> peak = device_peak_tflops(ops);
    const bool replicas_ok = mismatched.empty(), recheck_ok = f.recheck_mismatched == 0;
    nlohmann::json record = {
        {"schema_version", kSchemaVersion},
        {"subcommand", "train"},
        {"run_id", run_id()},
        {"timestamp", utc_timestamp()},
        {"world_size", n},
        {"launched_world_size", launched},
        {"backend", ops.name()},
        {"precision", precision_name(ops.precision())},
        {"grad_dtype", grad_dtype_name(cfg.grad_dtype)},
        {"model", trainer.model().name()},
        {"num_params", trainer.model().num_params()},
        {"scaling_mode", scaling_mode_name(cfg.scaling_mode)},
        {"local_batch", trainer.local_batch()},
        {"global_batch", global_batch},
        {"warmup_steps", cfg.warmup},
        {"measured_steps", cfg.steps},
        {"step_ms", to_json(row.step)},
        {"compute_ms", to_json(row.compute)},
        {"exposed_comm_ms", to_json(row.exposed)},
        {"optimizer_ms", to_json(row.optimizer)},
        {"median_step", f.median_step},
        {"samples_per_s", row.samples_per_s},
        {"samples_per_s_per_rank", row.per_rank},
        {"tokens_per_s", row.samples_per_s * tokens_per_sample(cfg)},
        {"scaling_efficiency", or_null(row.efficiency)},
        {"speedup", or_null(row.samples_per_s / samples_per_s_at_1)},
        {"gradient_bytes", gradient_bytes},
        {"buckets", trainer.bucketer().buckets().size()},
        {"allreduce_ms", f.allreduce_ms},
        {"allreduce_algbw_gbps", algbw},
        {"allreduce_busbw_gbps", row.busbw},
        {"model_flops_per_step", flops_per_step},
        {"model_tflops_per_s", tflops},
        {"peak_tflops_per_gpu", peak ? nlohmann::json(*peak) : nlohmann::json()},
        {"mfu", peak ? nlohmann::json(tflops / (n * *peak)) : nlohmann::json()},
        {"cuda_graphs", trainer.uses_graphs()},
        {"kernel_variants", kernel_variants(ops)},
        {"shared_gpu", shared_gpu_enabled()},
        {"conv_engine", cfg.model == "resnet" ? nlohmann::json(conv_engine_name(resolve_conv_engine(cfg, ops)))
                                              : nlohmann::json()},
        {"device_step_ms", or_null(f.device_step_ms)},
        {"host_overhead_ms", or_null(row.step.median - f.device_step_ms)},
        {"gpu_busy_fraction", or_null(f.device_step_ms / row.step.median)},
        {"telemetry_by_rank", f.telemetry_by_rank},
        {"straggler_check", f.straggler_check},
        {"initial_loss", f.mean_losses[0]},
        {"final_loss", f.mean_losses[1]},
        {"replica_check", {{"passed", replicas_ok}, {"checksum", fmt::format("{:016x}", f.checksums[0])},
                           {"mismatched_ranks", mismatched}}},
        {"loss_check", {{"passed", f.first_nonfinite_step < 0},
                        {"first_nonfinite_step", f.first_nonfinite_step < 0 ? nlohmann::json() : nlohmann::json(f.first_nonfinite_step + 1)}}},
        {"checks_passed", replicas_ok && recheck_ok && f.first_nonfinite_step < 0},
        {"config", to_json(cfg)},
        {"environment", environment},
    };
    if (checks.recheck_allreduce)
        record["allreduce_recheck"] = {{"passed", recheck_ok}, {"mismatched_elements", f.recheck_mismatched}};
    return record;
}

// Rank 0: the table row of one world size; `samples_per_s_at_1` is the n = 1 throughput (NAN
// before it is measured).
ScalingRow scaling_row(const DataParallelTrainer& trainer, const SizeFigures& f, int n, double samples_per_s_at_1) {
    ScalingRow row;
    row.world_size = n;
    row.step = summarize(f.phase[0]);
    row.compute = summarize(f.phase[1]);
    row.exposed = summarize(f.phase[2]);
    row.optimizer = summarize(f.phase[3]);
    row.samples_per_s = trainer.global_batch() / (row.step.median / 1000.0);
    row.per_rank = row.samples_per_s / n;
    row.efficiency = row.samples_per_s / (n * (n == 1 ? row.samples_per_s : samples_per_s_at_1));
    const double gradient_bytes =
        static_cast<double>(trainer.bucketer().total_elements() * dtype_size(trainer.bucketer().comm_dtype()));
    row.busbw = gradient_bytes / (f.allreduce_ms / 1000.0) / 1e9 * 2.0 * (n - 1) / n;
    return row;
}

}  // namespace

bool run_training_sweep(const TrainConfig& cfg, Ops& ops, MPI_Comm world, const nlohmann::json& environment,
                        const SweepChecks& checks) {
    int world_rank = 0, world_size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &world_rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &world_size));
    const std::vector<std::string> hosts =
        environment.contains("hostnames") ? environment["hostnames"].get<std::vector<std::string>>()
                                          : std::vector<std::string>{};
    const bool show_progress = world_rank == 0 && output_is_watched();
    double samples_per_s_at_1 = NAN;
    bool all_passed = true;
    bool header_printed = false;
    // One gradient communicator for the launch; each world size splits its first n ranks.
    std::unique_ptr<Communicator> world_comm = create_communicator(ops, world);

    for (int n : world_sizes(cfg, world_size)) {
        MPI_Comm sub = split_first_ranks(world, n);  // host-side reductions of the figures
        std::unique_ptr<Communicator> comm = world_comm->split_first(n);
        nlohmann::json record;
        ScalingRow row;
        if (sub != MPI_COMM_NULL) {
            DataParallelTrainer trainer(cfg, ops, *comm);
            if (world_rank == 0 && !header_printed) {
                print_header(cfg, ops, trainer.model().num_params(), world_size);
                header_printed = true;
            }
            ProgressLine progress(show_progress, n, cfg.warmup + cfg.steps);
            const LocalSamples local = run_steps(trainer, cfg, ops, progress);
            const SizeFigures figures = reduce_figures(trainer, local, sub, n, checks, environment);
            if (world_rank == 0) {
                const nlohmann::json mismatched = mismatched_replicas(figures, hosts);
                if (figures.recheck_mismatched != 0)
                    fmt::print(stderr, "all-reduce recheck FAILED at {} ranks: {} gradient elements differ between two "
                                       "all-reduces of identical inputs\n", n, figures.recheck_mismatched);
                if (figures.first_nonfinite_step >= 0)
                    fmt::print(stderr, "loss check FAILED at {} ranks: the loss stopped being finite at step {} of {} "
                                       "(warm-up included); the run diverged (too large a learning rate?)\n",
                               n, figures.first_nonfinite_step + 1, cfg.warmup + cfg.steps);
                all_passed = all_passed && mismatched.empty() && figures.recheck_mismatched == 0 &&
                             figures.first_nonfinite_step < 0;
                row = scaling_row(trainer, figures, n, samples_per_s_at_1);
                if (n == 1) samples_per_s_at_1 = row.samples_per_s;
                record = train_record(cfg, ops, trainer, figures, row, samples_per_s_at_1, world_size, mismatched,
                                      checks, environment);
            }
            SB_CHECK_MPI(MPI_Comm_free(&sub));
        }
        SB_CHECK_MPI(MPI_Barrier(world));  // ranks outside this sub-world wait here
        if (world_rank == 0) {
            print_scaling_table_row(row);
            for (const nlohmann::json& s : record["straggler_check"]["stragglers"])
                fmt::print("  straggler at {} ranks: {}\n", n, straggler_line(s));
            append_record(cfg.out, record);
        }
    }
    if (world_rank == 0) fmt::print("results appended to {}\n", cfg.out);
    return all_passed;
}

}  // namespace sb
