// The data-parallel trainer (DESIGN: Step, Timing): one replica of the model on this rank,
// its step (forward and backward, whose bucket hooks start each bucket's gradient
// collective as its last gradient lands; the wait for every bucket; the optimizer) and the
// step's phase times; the test hooks that delay or fault a rank.
#pragma once

#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "collectives/bucketer.h"
#include "collectives/communicator.h"
#include "collectives/sharding.h"
#include "models/dataset.h"
#include "models/model.h"
#include "models/ops.h"
#include "src/core/config.h"
#include "src/core/rank_memory.h"

namespace sb {

// Local wall time of each phase of one step, in ms, and when each bucket's all-reduce was
// ready to start on this rank (ms after the step's start; empty where not measured).
struct StepTimes {
    double step = 0, compute = 0, exposed_comm = 0, optimizer = 0;
    std::vector<double> bucket_arrivals;
    std::vector<double> bucket_starts;  // where each bucket's all-reduce started (Communicator::starts_ms)
};

// Test-only hooks, from the environment, each RANK:NUMBER (world rank; unset: rank -1):
//   SCALEBENCH_TEST_DELAY_RANK=R:MS   rank R sleeps MS ms at the start of each step, inside
//                                     its compute time: a straggler;
//   SCALEBENCH_TEST_COMM_DELAY=R:MS   rank R sleeps MS ms after its buckets' collectives complete,
//                                     in every step that communicates and in the all-reduce timed
//                                     alone: communication that costs MS ms more, none of it hidden
//                                     (host-side: eager steps, not a replayed CUDA graph);
//   SCALEBENCH_TEST_CUDA_FAULT=R:STEP rank R's CUDA work faults (an illegal address) in step
//                                     STEP of each world size it trains in (CUDA backend only).
// Each part in its entry of the flag table ("SCALEBENCH_TEST_DELAY_RANK RANK", "... MS": a
// world rank, at most a minute of sleep, a step from 0). A bad value is a UserError naming the
// variable, its value and the part.
struct TestHook {
    int rank = -1;
    double value = 0;
    std::string text;  // the variable's value as set
};
// `number_part` names the second part's entry: "MS" or "STEP". Unset or empty: rank -1.
TestHook parse_test_hook(const std::string& variable, const std::string& number_part, const char* text);
// The three hooks from the environment, read at each call: a test may set and clear them within
// one process. main reads them once before any work, so a bad value is refused up front.
struct TestHooks {
    TestHook delay_rank, comm_delay, cuda_fault;
};
TestHooks read_test_hooks();
// "" when every hook set can fire in this run, else one line naming the variable: a rank that is
// not launched (the world holds `world_size` ranks), or a CUDA fault where `backend` (the Ops'
// name; "" while the backend is not chosen yet) is not "cuda". Checked by main before any
// subcommand that trains (world size, and a build without CUDA), and again by train and stress
// once the backend is chosen, before the run's first record or line.
std::string test_hooks_problem(const TestHooks& hooks, int world_size, const std::string& backend);

// One replica of the model on this rank, averaging gradients over `comm`.
class DataParallelTrainer {
public:
    DataParallelTrainer(const TrainConfig& cfg, Ops& ops, Communicator& comm);
    ~DataParallelTrainer();

    // Runs training step `step` (0-based; it picks the data batch): issue_step() queues
    // the work, step_times() waits for it and reads the phase markers. With communicate
    // false the step issues no gradient collective (DDP's no_sync): each rank updates its
    // replica from its own gradients, so the replicas part until set_params_host.
    StepTimes step(int64_t step, bool communicate = true) {
        issue_step(step, communicate);
        return step_times();
    }
    void issue_step(int64_t step, bool communicate = true);
    StepTimes step_times();
    // Whether issue_step runs without host waits, so it can be timed under hold_stream().
    bool step_is_host_free() const;
    // Whether steps replay CUDA graphs (cuda_graphs, a host-free step, a backend with graphs).
    bool uses_graphs() const { return use_graphs_; }
    float last_loss();                  // this rank's mean loss of the last step
    std::vector<float> params_host();   // fp32 master parameters
    int local_batch() const { return local_batch_; }
    int global_batch() const { return local_batch_ * comm_.size(); }
    int world_size() const { return comm_.size(); }
    const Model& model() const { return *model_; }
    const Bucketer& bucketer() const { return *bucketer_; }
    // Times (ms) of every bucket's gradient collective back to back, outside the step, once per
    // iteration: the all-reduce, or the reduce-scatter when sharded.
    std::vector<double> time_gradient_allreduce(int iterations);
    // Sharded: the shard layout and the median time of the parameters' all-gather alone (ms): every
    // bucket's, or sharding parameters the last step's gathers in its order.
    const ShardedState* sharded() const { return sharded_.get(); }
    const ParameterSlots* parameter_slots() const { return param_slots_.get(); }  // sharded modes
    double time_params_all_gather(int iterations);
    // What this rank's buffers hold by kind, the allocator's deltas around the model's
    // binding (activations) and the dataset (data), and `peak_total`: the backend's
    // high-water mark of allocations since the trainer was built began.
    RankMemory measured_memory() const;
    double peak_total_bytes() const { return static_cast<double>(ops_.peak_bytes() - live_before_); }

    // Replica checks (silent data corruption): models/checksum.h's checksum of the fp32
    // parameters the model reads (sharded: as gathered into this rank's slots), which data
    // parallelism keeps bitwise identical on every rank; set_params_host replaces the master
    // values (and what the model reads), e.g. to resynchronise a replica found to differ.
    uint64_t params_checksum();
    void set_params_host(const std::vector<float>& params);
    // Test hook: flips bit `bit` (0..31) of parameter `index` on this rank only (sharded: in the
    // slot it is read from; refused sharding parameters, whose slots are gathered afresh).
    void flip_parameter_bit(size_t index, int bit);
    // Reduces the gradient buffer as it stands twice (every bucket's collective: the all-reduce,
    // or the reduce-scatter into the shard when sharded), from identical inputs, and
    // counts the elements whose two results differ in any bit on this rank (0 for a
    // deterministic reduction). Collective over the trainer's communicator.
    size_t recheck_gradient_allreduce();

private:
    // Forward, backward and the bucket all-reduces (none without communicate), up to the optimizer.
    void issue_gradients(int64_t step, bool communicate);
    void replay_gradients(int64_t step, bool communicate);  // the same as a CUDA graph
    void wait_for_buckets(bool communicate);               // and SCALEBENCH_TEST_COMM_DELAY
    void apply_optimizer(bool communicate);  // communicate false: a sharded step gathers nothing
    // The step's start marker and the buckets' arrival clock (and the test-only delay).
    void start_step_clocks();
    void inject_test_fault(int64_t step);  // SCALEBENCH_TEST_CUDA_FAULT
    void all_reduce_every_bucket();
    // The optimizer on this rank's shard, then (communicating, resident slots) the all-gather of
    // every bucket, which the next step's reads wait for.
    void update_sharded(bool communicate);

    const TrainConfig& cfg_;
    Ops& ops_;
    Communicator& comm_;
    int local_batch_ = 0;
    std::unique_ptr<Model> model_;
    std::unique_ptr<Dataset> data_;
    DeviceBuffer params_, weights_, grads_, state_a_, state_b_, loss_;
    std::unique_ptr<Bucketer> bucketer_;
    std::unique_ptr<ShardedState> sharded_;        // sharded modes
    std::unique_ptr<ParameterSlots> param_slots_;  // sharded modes: where the model reads the parameters
    size_t live_before_ = 0, bound_bytes_ = 0, data_bytes_ = 0;  // allocator accounting
    float loss_scale_ = 1.0f;  // fp16 dynamic loss scaling
    int good_steps_ = 0;
    int64_t optimizer_steps_ = 0;
    bool use_graphs_ = false;
    struct CapturedStep {
        int graph;           // the backend's handle
        const void* inputs;  // the input batch the graph reads
    };
    std::map<int, CapturedStep> graphs_;  // by data batch slot (+ dataset_batches: no communication)
};

// Checks the sweep runs on demand, beyond the replica check it always runs.

}  // namespace sb
