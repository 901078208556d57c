// The environment record of every result.
#include "src/system/environment.h"
#include "src/core/results.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "base/errors.h"

namespace sb {

const char* git_commit();  // generated at build time (cmake/GitVersion.cmake)

namespace {
std::string cpu_model() {
    std::ifstream in("/proc/cpuinfo");
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind("model name", 0) == 0) {
            auto colon = line.find(':');
            if (colon != std::string::npos) return line.substr(line.find_first_not_of(" \t", colon + 1));
        }
    }
    return "unknown";
}

std::string compiler() {
#if defined(__clang__)
    return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
    return std::string("gcc ") + __VERSION__;
#else
    return "unknown";
#endif
}

nlohmann::json slurm_facts() {
    nlohmann::json slurm = nlohmann::json::object();
    for (const char* key : {"SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_JOB_NODELIST", "SLURM_JOB_NUM_NODES",
                            "SLURM_JOB_PARTITION", "SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_STEP_ID"}) {
        if (const char* v = std::getenv(key)) slurm[key] = v;
    }
    return slurm;
}

// NCCL and MPI settings users tune, and the MPS daemon's pipe folder where a launch script names
// the daemon it started; recorded so a result says how it was run.
nlohmann::json tuning_variables() {
    nlohmann::json vars = nlohmann::json::object();
    for (char** e = environ; *e; ++e) {
        std::string kv(*e);
        auto eq = kv.find('=');
        std::string key = kv.substr(0, eq);
        // Open MPI's own launch variables (OMPI_MCA_orte_*, ess, pmix) are left out: only
        // the transport settings a user picks (btl, pml, mtl, coll, osc).
        const bool ompi_transport = key.rfind("OMPI_MCA_btl", 0) == 0 || key.rfind("OMPI_MCA_pml", 0) == 0 ||
                                    key.rfind("OMPI_MCA_mtl", 0) == 0 || key.rfind("OMPI_MCA_coll", 0) == 0 ||
                                    key.rfind("OMPI_MCA_osc", 0) == 0;
        if (key.rfind("NCCL_", 0) == 0 || key.rfind("UCX_", 0) == 0 || ompi_transport ||
            key == "CUDA_VISIBLE_DEVICES" || key == "OMP_NUM_THREADS" || key == "CUDA_MPS_PIPE_DIRECTORY")
            vars[key] = eq == std::string::npos ? "" : kv.substr(eq + 1);
    }
    return vars;
}
}  // namespace

nlohmann::json collect_environment(MPI_Comm world) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(world, &rank));
    SB_CHECK_MPI(MPI_Comm_size(world, &size));
    // Gather every rank's host name (fixed width keeps the collective simple).
    std::vector<char> mine(MPI_MAX_PROCESSOR_NAME, '\0');
    std::copy(process_info().host.begin(), process_info().host.end(), mine.begin());
    std::vector<char> all(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
    SB_CHECK_MPI(MPI_Gather(mine.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                            MPI_CHAR, 0, world));
    nlohmann::json env;
    if (rank != 0) return env;

    std::vector<std::string> hosts;
    std::map<std::string, int> ranks_per_host;
    for (int r = 0; r < size; ++r) {
        std::string h(&all[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]);
        hosts.push_back(h);
        ranks_per_host[h]++;
    }
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    SB_CHECK_MPI(MPI_Get_library_version(mpi_version, &length));
    std::string mpi(mpi_version, static_cast<size_t>(length));
    if (auto nl = mpi.find_first_of("\n,"); nl != std::string::npos) mpi = mpi.substr(0, nl);

    struct utsname uts {};
    uname(&uts);
    env["hostnames"] = hosts;  // index = world rank
    env["ranks_per_host"] = ranks_per_host;
    env["num_hosts"] = ranks_per_host.size();
    env["world_size"] = size;
    env["mpi_library"] = mpi;
    env["compiler"] = compiler();
    env["git_commit"] = git_commit();
    env["cpu_model"] = cpu_model();
    env["cpu_cores_online"] = sysconf(_SC_NPROCESSORS_ONLN);
    env["kernel"] = std::string(uts.sysname) + " " + uts.release;
    env["slurm"] = slurm_facts();
    env["tuning_variables"] = tuning_variables();
    return env;
}

// Collective over comm: every rank's JSON, in rank order, on rank 0 (empty elsewhere).
std::vector<nlohmann::json> gather_json(const nlohmann::json& mine, MPI_Comm comm) {
    int rank = 0, size = 1;
    SB_CHECK_MPI(MPI_Comm_rank(comm, &rank));
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    const std::string text = json_text(mine);
    int length = static_cast<int>(text.size());
    std::vector<int> lengths(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
    SB_CHECK_MPI(MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm));
    int total = 0;
    for (int r = 0; r < size; ++r) { offsets[static_cast<size_t>(r)] = total; total += lengths[static_cast<size_t>(r)]; }
    std::string all(static_cast<size_t>(rank == 0 ? total : 0), '\0');
    SB_CHECK_MPI(MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm));
    std::vector<nlohmann::json> result;
    if (rank == 0)
        for (int r = 0; r < size; ++r)
            result.push_back(parse_json(all.substr(static_cast<size_t>(offsets[static_cast<size_t>(r)]),
                                                              static_cast<size_t>(lengths[static_cast<size_t>(r)]))));
    return result;
}

}  // namespace sb
