// Every cuBLASLt call goes through SPW_CUBLAS, so a failure becomes one line
// naming the call as written, the status name and cuBLAS's reason:
//   SPW_CUBLAS(cublasLtMatmul(...))  ->  "cublasLtMatmul(...): CUBLAS_STATUS_NOT_SUPPORTED (...)"
#pragma once

#include <cublasLt.h>

#include <string>

#include "base/log.h"
#include "base/status.h"

namespace spillway {

inline std::string cublas_status_text(cublasStatus_t status) {
  return std::string(cublasLtGetStatusName(status)) + " (" + cublasLtGetStatusString(status) + ")";
}

}  // namespace spillway

#define SPW_CUBLAS(call)                                                              \
  do {                                                                                \
    const cublasStatus_t spw_cublas_status_ = (call);                                 \
    if (spw_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      throw ::spillway::Error(#call, ::spillway::cublas_status_text(spw_cublas_status_)); \
    }                                                                                 \
  } while (0)

// For destructors, which must not throw: the failure is logged instead.
#define SPW_CUBLAS_WARN(call)                                                         \
  do {                                                                                \
    const cublasStatus_t spw_cublas_status_ = (call);                                 \
    if (spw_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                \
      ::spillway::log_warn(std::string(#call) + ": " +                                \
                           ::spillway::cublas_status_text(spw_cublas_status_));       \
    }                                                                                 \
  } while (0)
