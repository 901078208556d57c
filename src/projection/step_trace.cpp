// The trace of one training step (src/projection/projection.h): the real model code run once on
// TraceOps with the runner's own Bucketer, the step's memory footprint, the largest batch that fits,
// and the workload a `train` record ran.
#include "src/projection/projection.h"

#include <cmath>

#include <fmt/format.h>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "base/errors.h"
#include "src/core/workload.h"

namespace sb {

namespace {

// A communicator that only records where the Bucketer issues each all-reduce.
class TraceCommunicator final : public Communicator {
public:
    TraceCommunicator(const TraceOps& ops, std::vector<TracedAllReduce>& out) : ops_(ops), out_(out) {}
    std::string name() const override { return "trace"; }
    int rank() const override { return 0; }
    int size() const override { return 1; }
    std::unique_ptr<CommRequest> all_reduce(const void*, void*, size_t count, DType dtype, ReduceOp) override {
        out_.push_back({ops_.position(), static_cast<double>(count * dtype_size(dtype))});
        return std::make_unique<Done>();
    }
    std::unique_ptr<CommRequest> reduce_scatter(const void*, void*, size_t, DType, ReduceOp) override { return none("reduce_scatter"); }
    std::unique_ptr<CommRequest> all_gather(const void*, void*, size_t, DType) override { return none("all_gather"); }
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
    struct Done final : CommRequest {
        bool test() override { return true; }
        void wait() override {}
    };
    std::unique_ptr<CommRequest> none(const char* what) {
        SB_REQUIRE(false, std::string("the training step issued a ") + what + ", which the projection does not model");
        return nullptr;
    }
    const TraceOps& ops_;
    std::vector<TracedAllReduce>& out_;
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

StepTrace trace_step(const TrainConfig& cfg, int local_batch, const DeviceLimits& limits) {
    SB_REQUIRE(local_batch > 0, "trace_step: local batch must be positive");
    TraceOps ops(cfg.precision, limits);
    StepTrace t;
    t.precision = cfg.precision;
    t.local_batch = local_batch;
    // As DataParallelTrainer's constructor: the model, its flat buffers, bound for the local batch.
    std::unique_ptr<Model> model = create_model(cfg, ops);
    const size_t n = model->num_params();
    const DType dtype = compute_dtype(cfg.precision);
    const bool adamw = cfg.optimizer.kind == OptimizerConfig::Kind::adamw;
    DeviceBuffer params(ops, n * sizeof(float)), grads(ops, n * sizeof(float)), state_a(ops, n * sizeof(float)),
        loss(ops, sizeof(float));
    DeviceBuffer state_b, weights;
    if (adamw) state_b = DeviceBuffer(ops, n * sizeof(float));
    if (dtype != DType::f32) weights = DeviceBuffer(ops, n * dtype_size(dtype));
    t.memory.parameters = static_cast<double>(n) * (sizeof(float) + (weights.get() ? dtype_size(dtype) : 0));
    t.memory.gradients = static_cast<double>(n) * sizeof(float);
    t.memory.optimizer_state = static_cast<double>(n) * sizeof(float) * (adamw ? 2 : 1);
    const double before_bind = ops.allocated_bytes();
    model->bind(FlatBuffers{params.as<float>(), weights.get() ? weights.get() : params.get(), grads.as<float>()},
                local_batch);
    t.memory.activations = ops.allocated_bytes() - before_bind;
    // One batch of one rank: the data is never read, only its shapes, so none is generated. The
    // dataset keeps dataset_batches of them on the device.
    const BatchShape batch = batch_shape(cfg);
    DeviceBuffer inputs(ops, static_cast<size_t>(local_batch * batch.cols) * dtype_size(batch.dtype));
    DeviceBuffer labels(ops, static_cast<size_t>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    t.memory.data = static_cast<double>(cfg.dataset_batches) *
                    (static_cast<double>(local_batch * batch.cols) * dtype_size(batch.dtype) +
                     static_cast<double>(local_batch * batch.labels_per_row) * sizeof(int32_t));
    const double before_bucketer = ops.allocated_bytes();
    TraceCommunicator comm(ops, t.all_reduces);
    Bucketer bucketer(model->params(), cfg.bucket_mb, comm, grads.as<float>(), ops, cfg.grad_dtype);
    t.memory.gradients += ops.allocated_bytes() - before_bucketer;  // the 16-bit buckets
    ops.clear();

    // As DataParallelTrainer::issue_step (fp16 takes the path where the step is applied).
    const Tensor weights_copy = weights.get() ? weights.tensor(dtype, 1, static_cast<int64_t>(n)) : Tensor{};
    const double before_step = ops.allocated_bytes();
    bucketer.start_step();
    OrderSink sink(bucketer);
    model->forward_backward(inputs.tensor(batch.dtype, local_batch, batch.cols), labels.as<int32_t>(),
                            loss.as<float>(), 1.0f, &sink);
    t.backward_end = ops.position();
    bucketer.wait_all();
    if (cfg.precision == Precision::fp16) ops.unscale_and_check(grads.as<float>(), n, 1.0f);
    t.optimizer_begin = ops.position();
    if (adamw)
        ops.adamw_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), state_b.as<float>(), n,
                       cfg.optimizer, 1, weights_copy);
    else
        ops.sgd_step(params.as<float>(), grads.as<float>(), state_a.as<float>(), n, cfg.optimizer, weights_copy);

    t.ops = ops.trace();
    // What the step allocated as it ran (the backend's per-call buffers) counts as activations.
    t.memory.activations += ops.allocated_bytes() - before_step;
    // The backend's scratch (models/cuda/cuda_ops.cu) holds small per-op partials: cuBLASLt fuses
    // every bias into the GEMM (a 16-bit C's bias rounded to C's dtype), so no GEMM product goes
    // through fp32 scratch; the partials are bounded by the traced ops' own buffers.
    t.model = model->name();
    t.num_params = n;
    t.flops_per_sample = model->flops_per_sample();
    t.gradient_order = sink.order;
    for (const auto& a : t.all_reduces) t.gradient_bytes += a.bytes;
    return t;
}

double footprint_bytes(const StepTrace& trace) {
    return trace.memory.total() + kGemmWorkspaceBytes + kRuntimeReserveBytes;
}

int max_fitting_batch(const TrainConfig& cfg, double memory_gb) {
    auto fits = [&](int batch) { return footprint_bytes(trace_step(cfg, batch)) <= memory_gb * kGiB; };
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
