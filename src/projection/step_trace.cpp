// The trace of one training step (src/projection/projection.h): the real model code run once on
// TraceOps with the runner's own Bucketer (and, sharded, its ShardedState), the step's memory
// footprint (the per-rank prediction `train` uses), the largest batch that fits, and the workload a
// `train` record ran.
#include "src/projection/projection.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "collectives/sharding.h"
#include "base/errors.h"
#include "src/core/workload.h"

namespace sb {

namespace {

constexpr size_t kNotWaited = static_cast<size_t>(-1);  // until the step waits for it (at its end at the latest)

// A communicator of `size` ranks (this one rank 0) that only records where the step issues each
// collective and where it waits for it.
class TraceCommunicator final : public Communicator {
public:
    TraceCommunicator(const TraceOps& ops, int size, std::vector<TracedCollective>& out)
        : ops_(ops), size_(size), out_(out) {}
    std::string name() const override { return "trace"; }
    int rank() const override { return 0; }
    int size() const override { return size_; }
    std::unique_ptr<CommRequest> all_reduce(const void*, void*, size_t count, DType dtype, ReduceOp) override {
        return record(Collective::all_reduce, count, dtype);
    }
    std::unique_ptr<CommRequest> reduce_scatter(const void*, void*, size_t recv_count, DType dtype, ReduceOp) override {
        return record(Collective::reduce_scatter, recv_count * static_cast<size_t>(size_), dtype);
    }
    std::unique_ptr<CommRequest> all_gather(const void*, void*, size_t send_count, DType dtype) override {
        return record(Collective::all_gather, send_count * static_cast<size_t>(size_), dtype);
    }
    std::unique_ptr<CommRequest> broadcast(void*, size_t, DType, int) override { return none("broadcast"); }
    std::unique_ptr<CommRequest> broadcast(const void*, void*, size_t, DType, int) override { return none("broadcast"); }
    std::unique_ptr<CommRequest> reduce(const void*, void*, size_t, DType, ReduceOp, int) override { return none("reduce"); }
    std::unique_ptr<CommRequest> alltoall(const void*, void*, size_t, DType) override { return none("alltoall"); }
    std::unique_ptr<CommRequest> sendrecv(const void*, void*, size_t, DType, int, int) override { return none("sendrecv"); }
    void barrier() override {}
    std::unique_ptr<Communicator> split_first(int) override {
        SB_REQUIRE(false, "the trace communicator does not split");
        return nullptr;
    }

private:
    // Its first wait marks where the step waits for the collective.
    struct Request final : CommRequest {
        Request(const TraceCommunicator& comm, size_t index) : comm_(comm), index_(index) {}
        bool test() override { return true; }
        void wait() override {
            if (!waited_) comm_.out_[index_].waited_at = comm_.ops_.position();
            waited_ = true;
        }
        const TraceCommunicator& comm_;
        size_t index_;
        bool waited_ = false;
    };
    std::unique_ptr<CommRequest> record(Collective kind, size_t count, DType dtype) {
        out_.push_back({kind, ops_.position(), kNotWaited, static_cast<double>(count * dtype_size(dtype))});
        return std::make_unique<Request>(*this, out_.size() - 1);
    }
    std::unique_ptr<CommRequest> none(const char* what) {
        SB_REQUIRE(false, std::string("the training step issued a ") + what + ", which the projection does not model");
        return nullptr;
    }
    const TraceOps& ops_;
    int size_;
    std::vector<TracedCollective>& out_;
};

// Forwards to the Bucketer and records the order gradients become final.
class OrderSink final : public GradientSink {
public:
    explicit OrderSink(GradientSink& next) : next_(next) {}
    void gradient_ready(int i) override {
        order.push_back(i);
        next_.gradient_ready(i);
    }
    std::vector<int> order;

private:
    GradientSink& next_;
};


}  // namespace

DeviceLimits profile_limits(const HardwareProfile& hw) {
    return architecture_limits(gpu_architecture(hw.peak)).value_or(TraceOps::default_trace_limits());
}

const char* collective_name(Collective c) {
    switch (c) {
        case Collective::all_reduce: return "all-reduce";
        case Collective::reduce_scatter: return "reduce-scatter";
        case Collective::all_gather: return "all-gather";
    }
    return "?";
}

double StepTrace::collective_bytes(Collective kind) const {
    double sum = 0;
    for (const TracedCollective& c : collectives)
        if (c.kind == kind) sum += c.bytes;
    return sum;
}

StepTrace trace_step(const TrainConfig& cfg, int local_batch, const DeviceLimits& limits, int world_size) {
    SB_REQUIRE(local_batch > 0 && world_size > 0, "trace_step: local batch and world size must be positive");
    TraceOps ops(cfg.precision, limits);
    StepTrace t;
    t.precision = cfg.precision;
    t.local_batch = local_batch;
    t.world_size = world_size;
    t.sharding = cfg.sharding;
    // As DataParallelTrainer's constructor: the model, its flat buffers (sharded: the master shard,
    // the slots the model reads from and no full optimizer state), bound for the local batch.
    std::unique_ptr<Model> model = create_model(cfg, ops);
    const size_t n = model->num_params();
    const DType dtype = compute_dtype(cfg.precision);
    const bool adamw = cfg.optimizer.kind == OptimizerConfig::Kind::adamw;
    const bool sharded = cfg.sharding != ShardingMode::none;
    const bool landing = cfg.sharding == ShardingMode::gradients || cfg.sharding == ShardingMode::parameters;
    const std::vector<Bucket> layout = bucket_layout(model->params(), cfg.bucket_mb);
    const size_t padded_n = n + (sharded ? ShardLayout(layout, world_size, 0).tail_padding() : 0);
    DeviceBuffer grads(ops, padded_n * sizeof(float)), loss(ops, sizeof(float));
    DeviceBuffer params, state_a, state_b, weights;
    if (!sharded) params = DeviceBuffer(ops, n * sizeof(float));
    if (!sharded) state_a = DeviceBuffer(ops, n * sizeof(float));
    if (!sharded && adamw) state_b = DeviceBuffer(ops, n * sizeof(float));
    if (!sharded && dtype != DType::f32) weights = DeviceBuffer(ops, n * dtype_size(dtype));
    // One batch of one rank: the data is never read, only its shapes, so none is generated.
    const BatchShape batch = batch_shape(cfg);
    DeviceBuffer inputs(ops, static_cast<size_t>(local_batch * batch.cols) * dtype_size(batch.dtype));
    DeviceBuffer labels(ops, static_cast<size_t>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    TraceCommunicator comm(ops, world_size, t.collectives);
    Bucketer bucketer(model->params(), cfg.bucket_mb, comm, grads.as<float>(), ops, cfg.grad_dtype);
    std::unique_ptr<ShardedState> shard;
    std::unique_ptr<ParameterSlots> slots;
    if (sharded) {
        shard = std::make_unique<ShardedState>(bucketer.buckets(), comm, ops, adamw);
        bucketer.shard_into(*shard);
        t.shard_elements = shard->layout().shard_elements();
        const ShardSlots counts = landing ? shard_slots(cfg) : ShardSlots{};
        if (landing) bucketer.land_in_slots(counts.landing);
        slots = std::make_unique<ParameterSlots>(model->params(), bucketer.buckets(), *shard, ops, dtype,
                                                 counts.parameters);
    }
    model->bind(FlatBuffers{params.as<float>(), weights.get() ? weights.get() : params.get(), grads.as<float>(),
                            landing ? &bucketer : nullptr, slots.get()},
                local_batch);
    ops.clear();

    // As DataParallelTrainer::issue_step (fp16 takes the path where the step is applied). The
    // resident slots' gathers, which the next forward waits for, are charged to this step's end.
    const Tensor weights_copy = weights.get() ? weights.tensor(dtype, 1, static_cast<int64_t>(n)) : Tensor{};
    bucketer.start_step();
    OrderSink sink(bucketer);
    model->forward_backward(inputs.tensor(batch.dtype, local_batch, batch.cols), labels.as<int32_t>(),
                            loss.as<float>(), 1.0f, &sink);
    t.backward_end = ops.position();
    bucketer.wait_all();
    if (cfg.precision == Precision::fp16) ops.unscale_and_check(grads.as<float>(), n, 1.0f);
    t.optimizer_begin = ops.position();
    if (sharded) {  // as DataParallelTrainer::update_sharded
        slots->end_step();
        shard->update(cfg.optimizer, 1);
        if (slots->resident()) slots->gather_every_bucket();
    } else if (adamw) {
        ops.adamw_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), state_b.as<float>(), n,
                       cfg.optimizer, 1, weights_copy);
    } else {
        ops.sgd_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), n, cfg.optimizer, weights_copy);
    }

    t.ops = ops.trace();
    for (TracedCollective& c : t.collectives) c.waited_at = std::min(c.waited_at, t.ops.size());
    t.model = model->name();
    t.num_params = n;
    t.flops_per_sample = model->flops_per_sample();
    t.gradient_order = sink.order;
    t.gradient_bytes = static_cast<double>(bucketer.total_elements() * dtype_size(bucketer.comm_dtype()));
    t.buckets = bucketer.buckets().size();
    t.memory = predict_rank_memory(cfg, world_size, local_batch);
    return t;
}

double footprint_bytes(const RankMemory& memory) {
    return memory.total() + kGemmWorkspaceBytes + kRuntimeReserveBytes;
}

double footprint_bytes(const StepTrace& trace) { return footprint_bytes(trace.memory); }

int max_fitting_batch(const TrainConfig& cfg, double memory_gb, int world_size) {
    auto fits = [&](int batch) {
        return footprint_bytes(predict_rank_memory(cfg, world_size, batch)) <= memory_gb * kGiB;
    };
    if (!fits(1)) return 0;
    int lo = 1, hi = 2;  // fits(lo), and hi is the first power of two to test
    while (fits(hi)) {
        lo = hi;
        SB_REQUIRE(hi < (1 << 24), "max_fitting_batch: no memory limit reached");
        hi *= 2;
    }
    while (hi - lo > 1) {  // fits(lo), !fits(hi)
        const int mid = lo + (hi - lo) / 2;
        (fits(mid) ? lo : hi) = mid;
    }
    return lo;
}

TrainConfig config_of_record(const nlohmann::json& record, const std::string& where) {
    nlohmann::json c = record.at("config");
    c.erase("source");  // where the runner read it from, not a config key
    if (c.contains("scaling") && c["scaling"].empty()) c.erase("scaling");  // the default, written as []
    // The convolutions are the engine that ran, not this build's resolution of the config's auto
    // (the config reader checks the name).
    if (c.value("model", "") == "resnet") c["conv_engine"] = conv_engine_of_record(record);
    TrainConfig cfg = parse_config(c.dump(), where);
    validate_config(cfg);
    return cfg;
}

std::string conv_engine_of_record(const nlohmann::json& record) {
    return record.contains("conv_engine") && record["conv_engine"].is_string() ? record["conv_engine"].get<std::string>()
                                                                               : "im2col";
}

}  // namespace sb
