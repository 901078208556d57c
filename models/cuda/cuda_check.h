// Error checks for the CUDA libraries (DESIGN: Conventions): one macro per library, each
// throwing through sb::throw_call_error with file:line, the failing call's text and the
// library's own message. SB_CHECK_LAUNCH() goes right after every kernel launch.
#pragma once

#include <string>

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "base/errors.h"

#define SB_CHECK_CUDA(call)                                                                    \
    do {                                                                                       \
        cudaError_t sb_cuda_rc_ = (call);                                                      \
        if (sb_cuda_rc_ != cudaSuccess) {                                                      \
            /* clear a non-sticky error, so a later launch check does not report it again */    \
            (void)cudaGetLastError();                                                          \
            ::sb::throw_call_error("CUDA", #call,                                              \
                                   std::string(cudaGetErrorName(sb_cuda_rc_)) + ": " +         \
                                       cudaGetErrorString(sb_cuda_rc_),                        \
                                   __FILE__, __LINE__);                                        \
        }                                                                                      \
    } while (0)

#define SB_CHECK_CUBLAS(call)                                                                  \
    do {                                                                                       \
        cublasStatus_t sb_cublas_rc_ = (call);                                                 \
        if (sb_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                            \
            ::sb::throw_call_error("cuBLAS", #call, cublasGetStatusString(sb_cublas_rc_),      \
                                   __FILE__, __LINE__);                                        \
    } while (0)

#define SB_CHECK_NCCL(call)                                                                    \
    do {                                                                                       \
        ncclResult_t sb_nccl_rc_ = (call);                                                     \
        if (sb_nccl_rc_ != ncclSuccess)                                                        \
            ::sb::throw_call_error("NCCL", #call, ncclGetErrorString(sb_nccl_rc_), __FILE__,   \
                                   __LINE__);                                                  \
    } while (0)

// A launch error (bad configuration) shows at once; a fault inside the kernel shows at
// the next synchronizing call, which is checked too.
#define SB_CHECK_LAUNCH() SB_CHECK_CUDA(cudaGetLastError())
