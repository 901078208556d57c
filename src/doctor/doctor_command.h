// `scalebench doctor` (DESIGN: The doctor): reads the machine into a SystemSnapshot tier by
// tier (topology and configuration, transfer, collective, training), judges it (checks.h)
// against the bands of the detected hardware, and prints the verdicts on rank 0: the table,
// or JSON with --json, and a Markdown report with --report. Launched like the rest: one rank
// per GPU under mpirun or srun, on one GPU, or several ranks on one GPU with --share-gpu.
#pragma once

#include <string>
#include <vector>

#include <mpi.h>

namespace CLI {
class App;
}

namespace sb {

struct DoctorOptions {
    bool json = false;          // JSON on stdout instead of the table
    std::string report;         // Markdown report file
    std::string snapshot_out;   // the snapshot as read, to keep or to make a fixture of
    std::string from_snapshot;  // judge a recorded snapshot instead of reading the machine
    bool share_gpu = false;
    std::string train_config;   // the training tier's workload (default: mlp-large with a GPU, ci-small without)
    int train_steps = 10;
    std::string max_bytes = "1G";  // the all-reduce sweep's largest size
    double deadline_s = 120;       // per all-reduce sweep
    double load_s = 3;             // the GEMM load the clocks are read under
    std::vector<std::string> skip;  // tiers left out: transfer, collective, training
    std::string profile_dir;        // hardware profiles (default: the shipped configs/hardware)
};

void add_doctor_options(CLI::App& sub, DoctorOptions& opts);

// Collective over `world`. Returns 0 when no tier fails, else 32 + the failing tiers' bits
// (checks.h: exit_code); bad input is a UserError (exit 2).
int run_doctor(const DoctorOptions& opts, MPI_Comm world);

}  // namespace sb
