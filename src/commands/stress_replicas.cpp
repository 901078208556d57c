// The stress soak's replica (silent-data-corruption) check (see stress.h): every rank's
// parameter checksum against the majority's, the differing ranks named and resynchronised.
#include "src/commands/stress.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "base/errors.h"
#include "src/commands/trainer.h"

namespace sb {

nlohmann::json to_json(const SdcEvent& e) {
    return {{"step", e.step}, {"workload", e.workload}, {"rank", e.rank}, {"host", e.host},
            {"gpu", e.gpu.empty() ? nlohmann::json() : e.gpu}, {"checksum", e.checksum}, {"expected", e.expected}};
}

std::vector<SdcEvent> check_replicas(DataParallelTrainer& trainer, MPI_Comm comm, int64_t step, int workload,
                                     const std::vector<RankIdentity>& ranks) {
    int size = 1;
    SB_CHECK_MPI(MPI_Comm_size(comm, &size));
    const uint64_t mine = trainer.params_checksum();
    std::vector<uint64_t> all(static_cast<size_t>(size));
    SB_CHECK_MPI(MPI_Allgather(&mine, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, comm));
    if (std::all_of(all.begin(), all.end(), [&](uint64_t c) { return c == all[0]; })) return {};

    // The majority is taken as right; with two ranks (or a tie) the lowest rank's group.
    std::map<uint64_t, int> votes;
    for (uint64_t c : all) ++votes[c];
    int reference = 0;
    for (int r = 0; r < size; ++r)
        if (votes[all[static_cast<size_t>(r)]] > votes[all[static_cast<size_t>(reference)]]) reference = r;
    const uint64_t expected = all[static_cast<size_t>(reference)];
    std::vector<SdcEvent> events;
    for (int r = 0; r < size; ++r) {
        if (all[static_cast<size_t>(r)] == expected) continue;
        SdcEvent e;
        e.step = step;
        e.workload = workload;
        e.rank = r;
        if (r < static_cast<int>(ranks.size())) {
            e.host = ranks[static_cast<size_t>(r)].host;
            e.gpu = ranks[static_cast<size_t>(r)].gpu;
        }
        e.checksum = fmt::format("{:016x}", all[static_cast<size_t>(r)]);
        e.expected = fmt::format("{:016x}", expected);
        events.push_back(std::move(e));
    }
    // Resynchronise so that this corruption is reported once and a later one is seen.
    std::vector<float> params = trainer.params_host();
    SB_CHECK_MPI(MPI_Bcast(params.data(), static_cast<int>(params.size()), MPI_FLOAT, reference, comm));
    if (mine != expected) trainer.set_params_host(params);
    return events;
}

}  // namespace sb
