#include "src/system/backend.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "collectives/mpi_communicator.h"
#include "models/cpu/cpu_ops.h"
#include "models/trace_ops.h"
#include "base/errors.h"
#include "src/core/files.h"
#include "src/core/rank_memory.h"
#include "src/core/workload.h"
#include "src/system/environment.h"
#ifdef SCALEBENCH_HAVE_CUDA
#include "collectives/nccl_communicator.h"
#include "models/cuda/cuda_ops.h"
#include <cuda_runtime_api.h>

#include "src/system/gpu_info.h"
#include "src/system/gpu_peaks.h"
#endif

namespace sb {

bool cuda_built() {
#ifdef SCALEBENCH_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

void agree_on_errors(MPI_Comm comm, const std::string& local_error) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    int mine = local_error.empty() ? size : rank;
    int first = size;
    SB_CHECK_MPI(MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm));
    if (first == size) return;
    int length = rank == first ? static_cast<int>(local_error.size()) : 0;
    SB_CHECK_MPI(MPI_Bcast(&length, 1, MPI_INT, first, comm));
    std::string message = rank == first ? local_error : std::string(static_cast<size_t>(length), '\0');
    SB_CHECK_MPI(MPI_Bcast(message.data(), length, MPI_CHAR, first, comm));
    throw AgreedError(message);
}

namespace {
bool shared_gpu_mode = false;
}  // namespace

SharedGpuEnv shared_gpu_env(const std::string& host, int world_rank, bool one_host, const char* nccl_hostid,
                            const char* nccl_socket_ifname) {
    SharedGpuEnv env;
    const std::string base = nccl_hostid && *nccl_hostid ? nccl_hostid : host;
    env.host_id = fmt::format("{}-rank{}", base, world_rank);
    if (one_host && !(nccl_socket_ifname && *nccl_socket_ifname)) env.socket_ifname = "lo";
    return env;
}

int shared_gpu_device(int local_rank, int visible_gpus) { return visible_gpus > 0 ? local_rank % visible_gpus : 0; }

void enable_shared_gpu(MPI_Comm world) {
    const ProcessInfo& p = process_info();
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    int mine = p.local_size == size ? 1 : 0, all = 0;  // every rank on one host
    SB_CHECK_MPI(MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, world));
    const SharedGpuEnv env = shared_gpu_env(p.host, p.world_rank, all == 1, std::getenv("NCCL_HOSTID"),
                                            std::getenv("NCCL_SOCKET_IFNAME"));
    ::setenv("NCCL_HOSTID", env.host_id.c_str(), 1);
    if (!env.socket_ifname.empty()) ::setenv("NCCL_SOCKET_IFNAME", env.socket_ifname.c_str(), 1);
    for (const NcclDefault& d : kSharedGpuNcclDefaults) {
        const char* set = std::getenv(d.name);
        if (!(set && *set)) ::setenv(d.name, d.value, 1);
    }
    shared_gpu_mode = true;
}

bool shared_gpu_enabled() { return shared_gpu_mode; }

namespace {
// Collective: two ranks of one host driving the same GPU would make every figure wrong.
void check_one_rank_per_gpu(int device, MPI_Comm world) {
    std::string bus_id = "none";
#ifdef SCALEBENCH_HAVE_CUDA
    char text[32] = {};
    if (device >= 0 && cudaDeviceGetPCIBusId(text, sizeof text, device) == cudaSuccess) bus_id = text;
#endif
    (void)device;
    const ProcessInfo& p = process_info();
    MPI_Comm local;
    SB_CHECK_MPI(MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, p.world_rank, MPI_INFO_NULL, &local));
    std::vector<char> mine(32, '\0'), all(32 * static_cast<size_t>(p.local_size));
    std::copy(bus_id.begin(), bus_id.end(), mine.begin());
    std::vector<int> ranks(static_cast<size_t>(p.local_size));
    SB_CHECK_MPI(MPI_Allgather(mine.data(), 32, MPI_CHAR, all.data(), 32, MPI_CHAR, local));
    SB_CHECK_MPI(MPI_Allgather(&p.world_rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, local));
    SB_CHECK_MPI(MPI_Comm_free(&local));
    std::vector<std::string> bus_ids;
    for (int i = 0; i < p.local_size; ++i) bus_ids.emplace_back(&all[32 * static_cast<size_t>(i)]);
    agree_on_errors(world, one_rank_per_gpu_problem(bus_ids, ranks, p.host));
}
}  // namespace

std::string one_rank_per_gpu_problem(const std::vector<std::string>& bus_ids, const std::vector<int>& ranks,
                                     const std::string& host) {
    for (size_t i = 0; i < bus_ids.size(); ++i)
        for (size_t j = i + 1; j < bus_ids.size(); ++j)
            if (bus_ids[i] == bus_ids[j])
                return fmt::format("ranks {} and {} on host {} both drive GPU {}: one rank per GPU (--share-gpu lets "
                                   "ranks share a GPU, for rehearsal and tests: no hardware figures)",
                                   ranks[i], ranks[j], host, bus_ids[i]);
    return "";
}

TrainConfig load_config_everywhere(const std::string& path, MPI_Comm world) {
    int rank = 0;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    std::string text, error;
    TrainConfig cfg;
    if (rank == 0 && !path.empty()) {
        try {
            text = read_text_file(path, "config file");  // type and size checked before a byte is read
            cfg = parse_config(text, path);
        } catch (const UserError& e) {
            error = e.what();
        }
    }
    agree_on_errors(world, error);  // a bad config is refused before the other ranks parse it
    long length = static_cast<long>(text.size());
    SB_CHECK_MPI(MPI_Bcast(&length, 1, MPI_LONG, 0, world));
    text.resize(static_cast<size_t>(length));
    SB_CHECK_MPI(MPI_Bcast(text.data(), static_cast<int>(length), MPI_CHAR, 0, world));
    if (rank != 0 && !path.empty()) cfg = parse_config(text, path);
    return cfg;
}

namespace {

// Collective: CPU ranks sharing a core measure the sharing, not the scaling; rank 0 says so
// once, naming each host that has more ranks than cores.
void warn_if_more_ranks_than_cores(MPI_Comm world) {
    const ProcessInfo& p = process_info();
    const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);  // of the host (mpirun binds each rank to fewer)
    const nlohmann::json mine = {{"host", p.host}, {"ranks", p.local_size}, {"cores", cores}, {"local_rank", p.local_rank}};
    const std::vector<nlohmann::json> all = gather_json(mine, world);
    std::vector<std::string> crowded;
    for (const nlohmann::json& r : all)
        if (r["local_rank"] == 0 && r["ranks"].get<long>() > r["cores"].get<long>())
            crowded.push_back(fmt::format("{} ranks on {} cores of {}", r["ranks"].get<long>(), r["cores"].get<long>(),
                                          r["host"].get<std::string>()));
    if (p.world_rank == 0 && !crowded.empty())
        fmt::print(stderr, "scalebench: warning: more CPU ranks than cores ({}): ranks share cores, so the figures "
                           "measure the sharing, not the scaling\n", fmt::join(crowded, ", "));
}

std::string gib(double bytes) { return fmt::format("{:.1f} GiB", bytes / double(1ull << 30)); }

// MemAvailable of /proc/meminfo in bytes, or 0 when it cannot be read.
double host_available_bytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    double kib = 0;
    std::string unit;
    while (in >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024;
    return 0;
}

// The host's available memory shared by the ranks on the host, and where it comes from.
std::pair<double, std::string> host_memory_free_to_rank() {
    const ProcessInfo& p = process_info();
    const double available = host_available_bytes();
    if (p.local_size <= 1) return {available, "host memory available"};
    return {available / p.local_size,
            fmt::format("host memory available, {} shared by {} ranks", gib(available), p.local_size)};
}

// "" when `needed` bytes fit `free_to_rank` (or it is unknown), else the refusal.
std::string shortfall(double needed, const std::pair<double, std::string>& free_to_rank, const std::string& what_needs,
                      const std::string& parts, const std::string& remedy) {
    const auto& [free_bytes, where] = free_to_rank;
    if (free_bytes <= 0 || needed <= free_bytes) return "";
    const ProcessInfo& p = process_info();
    return fmt::format("{} needs {} per rank ({}), but rank {} on {} has {} ({}): {}", what_needs, gib(needed), parts,
                       p.world_rank, p.host, gib(free_bytes), where, remedy);
}

// The largest per-rank prediction over the world sizes `cfg` measures in a launch of `launched`
// ranks, and that size's per-rank batch.
std::pair<double, int> largest_rank_memory(const TrainConfig& cfg, int launched) {
    double largest = 0;
    int batch = 0;
    for (int n : world_sizes(cfg, launched)) {
        const double total = predict_rank_memory(cfg, n, per_rank_batch(cfg, n)).total();
        if (total > largest) largest = total;
        batch = std::max(batch, per_rank_batch(cfg, n));
    }
    return {largest, batch};
}

// "sharding: MODE fits (...), or " when a sharding mode's prediction fits `capacity` at every
// world size above 1 the launch measures (at 1 rank sharding saves nothing), else "".
std::string fitting_mode_hint(const TrainConfig& cfg, int launched, double capacity) {
    if (cfg.sharding != ShardingMode::none || launched < 2 || capacity <= 0) return "";
    for (ShardingMode mode : {ShardingMode::optimizer, ShardingMode::gradients, ShardingMode::parameters}) {
        TrainConfig sharded = cfg;
        sharded.sharding = mode;
        sharded.grad_dtype = DType::f32;
        double largest = 0;
        for (int n : world_sizes(cfg, launched))
            if (n > 1) largest = std::max(largest, predict_rank_memory(sharded, n, per_rank_batch(cfg, n)).total());
        if (largest > 0 && largest <= capacity)
            return fmt::format("sharding: {} fits ({} per rank, with scaling entries above 1 only), or ",
                               sharding_mode_name(mode), gib(largest));
    }
    return "";
}

}  // namespace

std::pair<double, std::string> memory_free_to_rank(const Ops& ops) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (ops.name() == "cuda") {
        const ProcessInfo& p = process_info();
        size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
            (void)cudaGetLastError();  // unknown is no refusal; clear it so no later launch check reports it
            return {0, ""};
        }
        const std::string what = fmt::format("GPU memory free of {}", gib(static_cast<double>(total_bytes)));
        // Ranks sharing the GPU share what is free: those of this host on the same device.
        const int gpus = visible_gpu_count(), device = shared_gpu_device(p.local_rank, gpus);
        const int sharers = shared_gpu_mode && gpus > 0 ? (p.local_size - device + gpus - 1) / gpus : 1;
        if (sharers <= 1) return {static_cast<double>(free_bytes), what};
        return {static_cast<double>(free_bytes) / sharers, fmt::format("{}, shared by {} ranks", what, sharers)};
    }
#endif
    (void)ops;
    return host_memory_free_to_rank();
}

void check_memory_footprint(const std::vector<TrainConfig>& workloads, const Ops& ops, MPI_Comm world) {
    std::string error, what_needs, teachers;
    double needed = 0, host_needed = 0;  // on the backend; on the host while the data is generated
    for (const TrainConfig& cfg : workloads)  // the engine this backend runs, not the trace's default
        SB_REQUIRE(cfg.model != "resnet" || cfg.conv_engine, "the memory check needs the convolution engine resolved");
    try {
        int size = 1;
        SB_CHECK_MPI(MPI_Comm_size(world, &size));
        for (const TrainConfig& cfg : workloads) {
            const auto [rank_bytes, batch] = largest_rank_memory(cfg, size);
            needed += rank_bytes;  // src/core/rank_memory.h: the sharding mode's, the dataset's batches included
            host_needed += dataset_host_bytes(cfg, batch);
            TraceOps trace(cfg.precision);
            const std::unique_ptr<Model> model = create_model(cfg, trace);
            what_needs += fmt::format("{}{}: the {} workload ({} parameters{}) at batch {}",
                                      what_needs.empty() ? "" : "; ", cfg.source, model->name(), model->num_params(),
                                      cfg.sharding == ShardingMode::none ? "" : fmt::format(", sharding {}", sharding_mode_name(cfg.sharding)),
                                      batch);
            if (cfg.model == "mlp")
                teachers += fmt::format("{}{}mlp.teacher_hidden {}", teachers.empty() ? "" : ", ",
                                        workloads.size() > 1 ? cfg.source + "'s " : "", cfg.mlp.teacher_hidden);
        }
        const std::string parts = fmt::format("parameters, gradients, optimizer state, activations and data{}",
                                              workloads.size() > 1 ? ", every workload held at once" : "");
        const std::string generation =
            "the data as generated on the host" + (teachers.empty() ? "" : ", labelled by a teacher network of " + teachers);
        std::string remedy = "use a smaller model or batch" + (teachers.empty() ? "" : std::string(" (or mlp.teacher_hidden)"));
        if (workloads.size() == 1)
            remedy = fitting_mode_hint(workloads.front(), size,
                                       memory_free_to_rank(ops).first - (ops.name() == "cuda" ? 0 : host_needed)) +
                     remedy;
        if (ops.name() == "cuda") {
            error = shortfall(needed, memory_free_to_rank(ops), what_needs, parts, remedy);
            if (error.empty()) error = shortfall(host_needed, host_memory_free_to_rank(), what_needs, generation, remedy);
        } else {
            error = shortfall(needed + host_needed, memory_free_to_rank(ops), what_needs, parts + "; " + generation, remedy);
        }
    } catch (const std::exception& e) {
        error = fmt::format("{}: the workload's memory footprint could not be computed: {}", workloads.front().source,
                            e.what());
    }
    agree_on_errors(world, error);
}

std::unique_ptr<Ops> create_ops(BackendChoice choice, Precision precision, MPI_Comm world,
                                const std::string& backend_origin, const std::string& precision_origin) {
    const ProcessInfo& p = process_info();
    std::string error;
    std::unique_ptr<Ops> ops;
    int gpus = 0, device = -1;
#ifdef SCALEBENCH_HAVE_CUDA
    gpus = visible_gpu_count();
#endif
    // Every rank must take the same backend, so `auto` is decided collectively.
    int local_has_gpu = gpus > 0 ? 1 : 0, all_have_gpu = 0;
    SB_CHECK_MPI(MPI_Allreduce(&local_has_gpu, &all_have_gpu, 1, MPI_INT, MPI_MIN, world));
    if (choice == BackendChoice::auto_select)
        choice = all_have_gpu ? BackendChoice::cuda : BackendChoice::cpu;
    try {
        if (choice == BackendChoice::cuda) {
            if (!cuda_built())
                throw UserError(fmt::format("{}: backend cuda, but this scalebench was built without CUDA (no nvcc at "
                                            "build time): use --backend cpu", backend_origin));
            if (gpus == 0)
                throw UserError(fmt::format("{}: backend cuda, but no GPU is visible to rank {} on host {}: use "
                                            "--backend cpu", backend_origin, p.world_rank, p.host));
            // Rank i of a host drives GPU i; where each rank sees a single GPU (Slurm's
            // --gpus-per-task, CUDA_VISIBLE_DEVICES per rank) it drives that one.
            if (p.local_size > gpus && gpus > 1 && !shared_gpu_mode)
                throw UserError(fmt::format("{} ranks run on host {} but it has {} GPU(s) visible: one rank per GPU "
                                            "(launch at most {} ranks per host, or --share-gpu to let ranks share "
                                            "GPUs, for rehearsal and tests: no hardware figures)",
                                            p.local_size, p.host, gpus, gpus));
            device = shared_gpu_mode ? shared_gpu_device(p.local_rank, gpus) : p.local_size > gpus ? 0 : p.local_rank;
#ifdef SCALEBENCH_HAVE_CUDA
            ops = std::make_unique<CudaOps>(precision, device);
#endif
        } else {
            if (precision != Precision::fp32)
                throw UserError(fmt::format("{}: precision {} on CPU ranks, but the cpu backend runs fp32 only: add "
                                            "--precision fp32", precision_origin, precision_name(precision)));
            ops = std::make_unique<CpuOps>(precision);
        }
    } catch (const UserError& e) {
        error = e.what();
    }
    agree_on_errors(world, error);
    if (choice == BackendChoice::cuda && !shared_gpu_mode) check_one_rank_per_gpu(device, world);
    if (choice == BackendChoice::cpu) warn_if_more_ranks_than_cores(world);
    return ops;
}

std::unique_ptr<Communicator> create_communicator(Ops& ops, MPI_Comm comm, CollectiveStream stream) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (ops.name() == "cuda") return std::make_unique<NcclCommunicator>(comm, ops.stream(), stream);
#endif
    (void)ops;
    (void)stream;
    return std::make_unique<MpiCommunicator>(comm);
}

nlohmann::json device_environment(Ops& ops) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) {
        nlohmann::json env = gpu_environment(cuda->device());
        env["device_limits"] = to_json(*cuda->device_limits());
        return env;
    }
#endif
    (void)ops;
    return nlohmann::json::object();
}

nlohmann::json kernel_variants(Ops& ops) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) return cuda->kernel_variants();
#endif
    (void)ops;
    return nlohmann::json::object();
}

nlohmann::json run_environment(Ops& ops, MPI_Comm world) {
    int rank = 0;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    nlohmann::json environment = collect_environment(world);
    const std::vector<nlohmann::json> devices = gather_json(device_environment(ops), world);
    if (rank == 0 && !devices.front().empty()) {
        environment["gpu"] = devices.front();
        environment["gpus_by_rank"] = devices;
    }
    return environment;
}

void check_grad_dtype_backend(const TrainConfig& cfg, const Ops& ops, const std::string& origin) {
    if (ops.name() == "cpu" && cfg.grad_dtype != DType::f32)
        throw AgreedError(fmt::format("{}: {} needs the cuda backend; the cpu backend all-reduces fp32", origin,
                                      grad_dtype_name(cfg.grad_dtype)));
}

std::optional<double> device_peak_tflops(Ops& ops) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) {
        const auto env = gpu_environment(cuda->device());
        const auto peak = find_gpu_peak(env.value("name", std::string()));
        if (!peak) return std::nullopt;
        return peak_tflops_for_dtype(*peak, precision_name(ops.precision()));
    }
#endif
    (void)ops;
    return std::nullopt;
}

#ifdef SCALEBENCH_HAVE_CUDA
namespace {
class NvmlTelemetry final : public Telemetry {
public:
    explicit NvmlTelemetry(int device) : sampler_(device) {}
    void start() override { sampler_.start(); }
    nlohmann::json stop() override { return sampler_.stop(); }

private:
    TelemetrySampler sampler_;
};
}  // namespace
#endif

std::unique_ptr<Telemetry> start_telemetry(Ops& ops) {
#ifdef SCALEBENCH_HAVE_CUDA
    if (auto* cuda = dynamic_cast<CudaOps*>(&ops)) {
        auto t = std::make_unique<NvmlTelemetry>(cuda->device());
        t->start();
        return t;
    }
#endif
    (void)ops;
    return nullptr;
}

}  // namespace sb
