// What a calibration record must be before `project --calibrate` believes it: one of the
// kinds calibration reads, measured on the GPU (a comm record of backend mpi times host
// memory, not the GPU's), and each number calibration reads inside its range, from one table
// with the reason for each bound. A record outside is refused naming the file, record and
// key: an op time of 1e9 ms would project 0.0 samples/s, a local_batch of -1 a broken trace.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace sb {

// Throws UserError "WHERE: key 'K': must be in ..., got V (reason)" or "WHERE: ..." naming
// what is wrong; records of kinds calibration does not read pass (they are skipped there).
void check_calibration_record(const nlohmann::json& record, const std::string& where);

}  // namespace sb
