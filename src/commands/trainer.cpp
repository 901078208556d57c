// The data-parallel trainer (see trainer.h): one replica's buffers, its step (forward and
// backward with the bucket hooks, the gradient collective, the optimizer), the step's phase
// clocks, the back-to-back all-reduce timing and the replica checks' hooks.
#include "src/commands/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "base/errors.h"
#include "base/numbers.h"
#include "collectives/deadline.h"
#include "models/checksum.h"
#include "src/core/files.h"
#include "src/core/flag_reading.h"
#include "src/core/stats.h"
#include "src/core/workload.h"
#include "src/system/backend.h"
#include "src/system/environment.h"

namespace sb {

namespace {
// Marker slots of one step (Ops::record_marker).
enum Marker { kStepStart = 0, kBackwardEnd = 1, kCommWaited = 2, kOptimizerEnd = 3, kCommStart = 4, kCommEnd = 5 };

// GradScaler's defaults (torch.amp): start at 2^16, halve on overflow, double after 2000 good steps.
constexpr float kInitialLossScale = 65536.0f;
constexpr int kLossScaleGrowthInterval = 2000;
}  // namespace

TestHook parse_test_hook(const std::string& variable, const std::string& number_part, const char* text) {
    if (!text || !*text) return {};
    const std::string value = text;
    const size_t colon = value.find(':');
    if (colon == std::string::npos)
        throw UserError(fmt::format("{}='{}': expected RANK:{}, e.g. 1:20", variable, value, number_part));
    // Each part by the one number parser, in its entry of the flag table (src/core/flag_reading.cpp).
    int64_t rank = 0;
    double number = 0;
    std::string problem = parse_part(variable + " RANK", value.substr(0, colon), rank);
    if (problem.empty()) problem = parse_part(variable + " " + number_part, value.substr(colon + 1), number);
    if (!problem.empty()) throw UserError(fmt::format("{}='{}': {}", variable, value, problem));
    return {static_cast<int>(rank), number, value};
}

std::string test_hooks_problem(const TestHooks& hooks, int world_size, const std::string& backend) {
    const std::pair<const char*, const TestHook*> set[] = {{"SCALEBENCH_TEST_DELAY_RANK", &hooks.delay_rank},
                                                           {"SCALEBENCH_TEST_COMM_DELAY", &hooks.comm_delay},
                                                           {"SCALEBENCH_TEST_CUDA_FAULT", &hooks.cuda_fault}};
    for (const auto& [variable, hook] : set)
        if (hook->rank >= world_size)
            return fmt::format("{}='{}': rank {} is not launched (the world holds {} rank{}, 0 to {}), so the hook "
                               "would never fire",
                               variable, printable(hook->text), hook->rank, world_size, world_size == 1 ? "" : "s",
                               world_size - 1);
    if (hooks.cuda_fault.rank >= 0 && !backend.empty() && backend != "cuda")
        return fmt::format("SCALEBENCH_TEST_CUDA_FAULT='{}': a CUDA fault needs the cuda backend, and this run's is {}",
                           printable(hooks.cuda_fault.text), backend);
    return "";
}

TestHooks read_test_hooks() {
    auto hook = [](const char* variable, const char* number_part) {
        return parse_test_hook(variable, number_part, std::getenv(variable));
    };
    return {hook("SCALEBENCH_TEST_DELAY_RANK", "MS"), hook("SCALEBENCH_TEST_COMM_DELAY", "MS"),
            hook("SCALEBENCH_TEST_CUDA_FAULT", "STEP")};
}

DataParallelTrainer::DataParallelTrainer(const TrainConfig& cfg, Ops& ops, Communicator& comm)
    : cfg_(cfg), ops_(ops), comm_(comm) {
    local_batch_ = per_rank_batch(cfg, comm.size());
    model_ = create_model(cfg, ops, comm.rank());
    const size_t n = model_->num_params();
    const DType dtype = compute_dtype(ops.precision());
    const bool sharding = cfg.sharding != ShardingMode::none;
    SB_REQUIRE(!sharding || (ops.precision() != Precision::fp16 && cfg.grad_dtype == DType::f32),
               "sharding needs fp32 gradient collectives and no fp16 loss scaling (validate_config says why)");
    live_before_ = ops.live_bytes();
    ops.reset_peak_bytes();

    // Sharded, the rank holds its shard of the master parameters and the model reads them from
    // slots they are gathered into (ParameterSlots: every bucket's own, or a few shared sharding
    // parameters); the gradients land in the bucketer's slots sharding gradients or parameters,
    // else in the full buffer, which carries the zero tail a padded bucket's collectives reach.
    const bool landing = cfg.sharding == ShardingMode::gradients || cfg.sharding == ShardingMode::parameters;
    const size_t padded_n =
        n + (sharding ? ShardLayout(bucket_layout(model_->params(), cfg.bucket_mb), comm.size(), comm.rank())
                            .tail_padding()
                      : 0);
    if (!sharding) params_ = DeviceBuffer(ops, n * sizeof(float));
    if (!landing) {
        grads_ = DeviceBuffer(ops, padded_n * sizeof(float));
        ops.fill(grads_.tensor(DType::f32, 1, static_cast<int64_t>(padded_n)), 0.0f);
    }
    if (dtype != DType::f32 && !sharding) weights_ = DeviceBuffer(ops, n * dtype_size(dtype));
    const bool adamw = cfg.optimizer.kind == OptimizerConfig::Kind::adamw;
    if (!sharding) {  // sharded, the optimizer state is the shard's
        state_a_ = DeviceBuffer(ops, n * sizeof(float));
        ops.fill(state_a_.tensor(DType::f32, 1, static_cast<int64_t>(n)), 0.0f);
        if (adamw) {
            state_b_ = DeviceBuffer(ops, n * sizeof(float));
            ops.fill(state_b_.tensor(DType::f32, 1, static_cast<int64_t>(n)), 0.0f);
        }
    }

    // Identical initial weights on every rank: same seed, same portable generator.
    std::vector<float> host(n, 0.0f);
    model_->init_params(host.data(), cfg.seed);
    if (params_.get()) ops.upload(params_.get(), host.data(), n * sizeof(float));
    if (weights_.get())
        ops.cast(params_.tensor(DType::f32, 1, static_cast<int64_t>(n)), weights_.tensor(dtype, 1, static_cast<int64_t>(n)));

    bucketer_ = std::make_unique<Bucketer>(model_->params(), cfg.bucket_mb, comm, grads_.as<float>(), ops,
                                           cfg.grad_dtype);
    if (sharding) {
        sharded_ = std::make_unique<ShardedState>(bucketer_->buckets(), comm, ops, adamw);
        sharded_->set_params_shard(host);
        bucketer_->shard_into(*sharded_);
        const ShardSlots slots = landing ? shard_slots(cfg) : ShardSlots{};
        if (landing) bucketer_->land_in_slots(slots.landing);
        param_slots_ = std::make_unique<ParameterSlots>(model_->params(), bucketer_->buckets(), *sharded_, ops, dtype,
                                                        slots.parameters);
        if (param_slots_->resident()) param_slots_->gather_every_bucket();
    }
    FlatBuffers flat{params_.as<float>(), weights_.get() ? weights_.get() : params_.get(), grads_.as<float>(),
                     landing ? bucketer_.get() : nullptr, param_slots_.get()};
    size_t live = ops.live_bytes();
    model_->bind(flat, local_batch_);
    loss_ = DeviceBuffer(ops, sizeof(float));
    bound_bytes_ = ops.live_bytes() - live;
    live = ops.live_bytes();
    data_ = create_dataset(cfg, ops, global_batch(), comm.rank(), local_batch_);
    data_bytes_ = ops.live_bytes() - live;
    if (ops.precision() == Precision::fp16) loss_scale_ = kInitialLossScale;
    // Sharded, a read waits for its bucket's gather, issued outside the step's graph (resident) or
    // at the read: which slot holds which bucket is decided on the host.
    use_graphs_ = cfg.cuda_graphs && step_is_host_free() && ops.has_graphs() && !sharding;
}

DataParallelTrainer::~DataParallelTrainer() {
    for (const auto& [slot, captured] : graphs_) ops_.release_graph(captured.graph);
}

bool DataParallelTrainer::step_is_host_free() const {
    // fp16 loss scaling reads the overflow flag on the host; MPI waits on the host.
    return ops_.precision() != Precision::fp16 && ops_.stream() != nullptr;
}

// The gradients of one step: forward and backward, whose hooks hand each gradient to the
// bucketer as it lands (a full bucket starts its all-reduce at once, overlapping the rest of
// the backward), then the wait for every bucket. Without communication the same kernels and
// buckets run and no collective is issued (DDP's no_sync).
void DataParallelTrainer::issue_gradients(int64_t step, bool communicate) {
    bucketer_->start_step(communicate);
    if (param_slots_) param_slots_->set_gathering(communicate);
    model_->forward_backward(data_->inputs(step), data_->labels(step), loss_.as<float>(), loss_scale_,
                             bucketer_.get());
    ops_.record_marker(kBackwardEnd);
    wait_for_buckets(communicate);
    ops_.record_marker(kCommWaited);
}

void DataParallelTrainer::wait_for_buckets(bool communicate) {
    bucketer_->wait_all();
    const TestHook delay = read_test_hooks().comm_delay;
    if (communicate && delay.rank == process_info().world_rank)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay.value));
}

void DataParallelTrainer::issue_step(int64_t step, bool communicate) {
    if (use_graphs_ && step >= 1)
        replay_gradients(step, communicate);
    else {
        start_step_clocks();
        issue_gradients(step, communicate);
    }
    inject_test_fault(step);
    apply_optimizer(communicate);
    ops_.record_marker(kOptimizerEnd);
}

// With graphs, the first step runs eagerly (it sizes lazily grown buffers and caches GEMM
// plans, which a capture must not do); each later step replays the graph of its data batch
// (and of whether it communicates), captured on first use. The optimizer stays outside: its
// step count changes every step.
void DataParallelTrainer::replay_gradients(int64_t step, bool communicate) {
    const int slot = static_cast<int>(step % cfg_.dataset_batches) + (communicate ? 0 : cfg_.dataset_batches);
    const void* inputs = data_->inputs(step).data;
    auto it = graphs_.find(slot);
    if (it == graphs_.end()) {
        comm_.mark_arrivals();  // the capture records the buckets' arrival events from the first
        ops_.begin_capture();
        try {
            issue_gradients(step, communicate);
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
}

// The optimizer on the averaged gradients. With fp16, dynamic loss scaling first: every rank
// sees the same averaged gradients, so all take the same decision to apply or skip the step.
void DataParallelTrainer::apply_optimizer(bool communicate) {
    const size_t n = model_->num_params();
    if (ops_.precision() == Precision::fp16) {
        const bool finite = ops_.unscale_and_check(grads_.as<float>(), n, 1.0f / loss_scale_);
        if (!finite) {
            loss_scale_ *= 0.5f;
            good_steps_ = 0;
            return;
        }
        if (++good_steps_ == kLossScaleGrowthInterval) {
            loss_scale_ *= 2.0f;
            good_steps_ = 0;
        }
    }
    ++optimizer_steps_;
    const Tensor weights_copy =
        weights_.get() ? weights_.tensor(compute_dtype(ops_.precision()), 1, static_cast<int64_t>(n)) : Tensor{};
    if (sharded_)
        update_sharded(communicate);
    else if (cfg_.optimizer.kind == OptimizerConfig::Kind::adamw)
        ops_.adamw_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), state_b_.as<float>(), n,
                        cfg_.optimizer, optimizer_steps_, weights_copy);
    else
        ops_.sgd_step(params_.as<float>(), grads_.as<float>(), state_a_.as<float>(), n, cfg_.optimizer, weights_copy);
}

void DataParallelTrainer::update_sharded(bool communicate) {
    // No gather in flight reads the shard the optimizer updates. Resident slots are gathered
    // again at once (the next forward's reads wait for them); shared ones as they are read.
    param_slots_->end_step();
    sharded_->update(cfg_.optimizer, optimizer_steps_);
    if (communicate && param_slots_->resident()) param_slots_->gather_every_bucket();
}

void DataParallelTrainer::start_step_clocks() {
    ops_.record_marker(kStepStart);
    comm_.mark_arrivals();
    // Read at every step (a test may set or clear it between runs in one process).
    const TestHook delay = read_test_hooks().delay_rank;
    if (delay.rank == process_info().world_rank)
        std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(delay.value));
}

void DataParallelTrainer::inject_test_fault(int64_t step) {
    const TestHook fault = read_test_hooks().cuda_fault;
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
    if (param_slots_)
        param_slots_->download_masters(host.data());
    else
        ops_.download(host.data(), params_.get(), host.size() * sizeof(float));
    return host;
}

void DataParallelTrainer::all_reduce_every_bucket() {
    // Exactly what a step's buckets do (casts included with a 16-bit grad_dtype), but
    // all at once and with no backward to hide behind.
    bucketer_->start_step();
    for (int i = static_cast<int>(model_->params().size()) - 1; i >= 0; --i) bucketer_->gradient_ready(i);
    wait_for_buckets(true);
}

std::vector<double> DataParallelTrainer::time_gradient_allreduce(int iterations) {
    std::vector<double> times;
    for (int it = 0; it < iterations; ++it) {
        comm_.barrier();
        ops_.record_marker(kCommStart);
        all_reduce_every_bucket();
        ops_.record_marker(kCommEnd);
        times.push_back(ops_.elapsed_ms(kCommStart, kCommEnd));
    }
    return times;
}

double DataParallelTrainer::time_params_all_gather(int iterations) {
    SB_REQUIRE(sharded_, "the parameters' all-gather is timed on a sharded trainer only");
    std::vector<double> times;
    for (int it = 0; it < iterations; ++it) {
        comm_.barrier();
        ops_.record_marker(kCommStart);
        param_slots_->gather_last_step_again();
        ops_.record_marker(kCommEnd);
        times.push_back(ops_.elapsed_ms(kCommStart, kCommEnd));
    }
    return percentile(times, 50);
}

RankMemory DataParallelTrainer::measured_memory() const {
    RankMemory m;
    m.parameters = static_cast<double>(params_.bytes() + weights_.bytes()) +
                   (sharded_ ? static_cast<double>(sharded_->params_shard_bytes() + param_slots_->bytes()) : 0);
    m.gradients = static_cast<double>(grads_.bytes() + bucketer_->landing_bytes()) +
                  (sharded_ ? sharded_->gradient_bytes() : 0);
    m.optimizer_state = static_cast<double>(state_a_.bytes() + state_b_.bytes()) +
                        (sharded_ ? sharded_->optimizer_state_bytes() : 0);
    m.activations = static_cast<double>(bound_bytes_);
    m.data = static_cast<double>(data_bytes_);
    m.comm_buffers = static_cast<double>(bucketer_->comm_buffer_bytes());
    return m;
}

uint64_t DataParallelTrainer::params_checksum() {
    if (param_slots_) {  // of the parameters as this rank reads them
        std::vector<float> params(model_->num_params());
        param_slots_->download_read_values(params.data());
        return checksum_host(params.data(), params.size() * sizeof(float));
    }
    return ops_.checksum(params_.get(), model_->num_params() * sizeof(float));
}

void DataParallelTrainer::set_params_host(const std::vector<float>& params) {
    const size_t n = model_->num_params();
    SB_REQUIRE(params.size() == n, fmt::format("{} parameters given, the model has {}", params.size(), n));
    if (param_slots_) {  // no collective: a rank found to differ resynchronises alone
        param_slots_->set_values(params);
        sharded_->set_params_shard(params);
        return;
    }
    ops_.upload(params_.get(), params.data(), n * sizeof(float));
    if (weights_.get())
        ops_.cast(params_.tensor(DType::f32, 1, static_cast<int64_t>(n)),
                  weights_.tensor(compute_dtype(ops_.precision()), 1, static_cast<int64_t>(n)));
}

void DataParallelTrainer::flip_parameter_bit(size_t index, int bit) {
    SB_REQUIRE(index < model_->num_params() && bit >= 0 && bit < 32,
               fmt::format("parameter {} bit {} of {} parameters", index, bit, model_->num_params()));
    if (param_slots_) {  // the values this rank reads; its shard stays as every rank gathers it
        param_slots_->flip_read_bit(index, bit);
        return;
    }
    std::vector<float> params = params_host();
    uint32_t word = 0;
    std::memcpy(&word, &params[index], sizeof word);
    word ^= uint32_t{1} << bit;
    std::memcpy(&params[index], &word, sizeof word);
    set_params_host(params);
}

size_t DataParallelTrainer::recheck_gradient_allreduce() {
    SB_REQUIRE(!bucketer_->lands_in_slots(), "gradients landing in slots leave no gradient buffer to reduce twice");
    // The reduction lands in place, or in the gradient shard when sharded.
    const size_t n = model_->num_params();
    const size_t reduced = sharded_ ? sharded_->layout().shard_elements() : n;
    const void* result = sharded_ ? sharded_->gradient_shard() : grads_.get();
    std::vector<float> input(n), first(reduced), second(reduced);
    ops_.download(input.data(), grads_.get(), n * sizeof(float));
    all_reduce_every_bucket();
    ops_.download(first.data(), result, reduced * sizeof(float));
    ops_.upload(grads_.get(), input.data(), n * sizeof(float));
    all_reduce_every_bucket();
    ops_.download(second.data(), result, reduced * sizeof(float));
    size_t mismatched = 0;
    for (size_t i = 0; i < reduced; ++i) mismatched += std::memcmp(&first[i], &second[i], sizeof(float)) != 0;
    return mismatched;
}

}  // namespace sb
