// Error types and checks shared by the whole program (DESIGN: Conventions).
// UserError: bad input a user can fix; main prints its one line and exits 2.
// Anything else thrown is an internal failure: exit 1. Library checks
// (SB_CHECK_MPI here, SB_CHECK_CUDA/CUBLAS/NCCL in models/cuda/cuda_check.h) carry
// file:line, the failing call's text and the library's message.
#pragma once

#include <stdexcept>
#include <string>

namespace sb {

class UserError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_call_error(const char* library, const char* call, const std::string& message,
                                   const char* file, int line);

std::string mpi_error_string(int code);

}  // namespace sb

#define SB_CHECK_MPI(call)                                                                 \
    do {                                                                                   \
        int sb_mpi_rc_ = (call);                                                           \
        if (sb_mpi_rc_ != 0)                                                               \
            ::sb::throw_call_error("MPI", #call, ::sb::mpi_error_string(sb_mpi_rc_), __FILE__, \
                                   __LINE__);                                              \
    } while (0)

#define SB_REQUIRE(cond, message)                                                          \
    do {                                                                                   \
        if (!(cond)) ::sb::throw_call_error("internal", #cond, (message), __FILE__, __LINE__); \
    } while (0)

namespace sb {
// A user error every rank has agreed on (see agree_on_errors): main prints it once on
// rank 0 and every rank exits 2. Any other error is local to a rank and aborts the job.
class AgreedError : public UserError {
public:
    using UserError::UserError;
};
}  // namespace sb
