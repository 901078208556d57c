// Where the doctor's bands come from: the projection's hardware profiles (configs/hardware)
// and the published all-reduce figures (results/published/nccl_allreduce.yaml).
#pragma once

#include <string>
#include <vector>

#include "src/doctor/checks.h"

namespace sb::doctor {

// Every *.yaml profile in `dir` (sorted by name); a profile that does not load is a UserError.
std::vector<HardwareProfile> load_profiles(const std::string& dir);
// The entries of nccl_allreduce.yaml; UserError naming the file for one that does not read.
std::vector<PublishedBusbw> load_published_busbw(const std::string& path);

}  // namespace sb::doctor
