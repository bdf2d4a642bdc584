// src/dnn/cuda/cuda_check.hpp — check macros for the CUDA runtime, cuDNN, cuBLAS and NCCL.
//
// DT_CHECK_CUDA(call) / DT_CHECK_CUDNN / DT_CHECK_CUBLAS / DT_CHECK_NCCL evaluate `call` once and,
// when it does not return the library's success code, throw dtrain::LibraryError with the call
// text, the library's own error string and file:line (via dtrain::format_error, which adds the rank
// context). The *_NOTHROW variants log the same message to stderr instead of throwing; use them in
// destructors and other noexcept paths. Private to src/dnn/cuda (and the NCCL allreduce there).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <cstdio>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain::cuda_detail {

inline const char* error_string(cudaError_t e) { return cudaGetErrorString(e); }
inline const char* error_string(cudnnStatus_t e) { return cudnnGetErrorString(e); }
inline const char* error_string(cublasStatus_t e) { return cublasGetStatusString(e); }
inline const char* error_string(ncclResult_t e) { return ncclGetErrorString(e); }

/// "<lib> call `<call>` failed: <error string> (code N)" formatted with file:line and rank prefix.
template <typename Status>
std::string failure_message(const char* lib, const char* call, Status status, const char* file,
                            int line) {
  return ::dtrain::format_error(std::string(lib) + " call `" + call +
                                    "` failed: " + error_string(status) + " (code " +
                                    std::to_string(static_cast<int>(status)) + ")",
                                file, line);
}

/// Prints the failure message to stderr; never throws (for destructors).
template <typename Status>
void report_failure(const char* lib, const char* call, Status status, const char* file,
                    int line) noexcept {
  try {
    std::fprintf(stderr, "warning: %s\n", failure_message(lib, call, status, file, line).c_str());
  } catch (...) {
    std::fprintf(stderr, "warning: %s call failed at %s:%d\n", lib, file, line);
  }
}

}  // namespace dtrain::cuda_detail

#define DT_DETAIL_CHECK(lib, ok, call)                                                         \
  do {                                                                                         \
    const auto dt_status_ = (call);                                                            \
    if (dt_status_ != (ok))                                                                    \
      throw ::dtrain::LibraryError(                                                            \
          ::dtrain::cuda_detail::failure_message(lib, #call, dt_status_, __FILE__, __LINE__)); \
  } while (0)

#define DT_DETAIL_CHECK_NOTHROW(lib, ok, call)                                           \
  do {                                                                                   \
    const auto dt_status_ = (call);                                                      \
    if (dt_status_ != (ok))                                                              \
      ::dtrain::cuda_detail::report_failure(lib, #call, dt_status_, __FILE__, __LINE__); \
  } while (0)

/// Throws LibraryError unless the CUDA runtime call returns cudaSuccess.
#define DT_CHECK_CUDA(call) DT_DETAIL_CHECK("CUDA", cudaSuccess, call)
/// Throws LibraryError unless the cuDNN call returns CUDNN_STATUS_SUCCESS.
#define DT_CHECK_CUDNN(call) DT_DETAIL_CHECK("cuDNN", CUDNN_STATUS_SUCCESS, call)
/// Throws LibraryError unless the cuBLAS call returns CUBLAS_STATUS_SUCCESS.
#define DT_CHECK_CUBLAS(call) DT_DETAIL_CHECK("cuBLAS", CUBLAS_STATUS_SUCCESS, call)
/// Throws LibraryError unless the NCCL call returns ncclSuccess. Callers holding a communicator
/// must abort it first (see nccl_allreduce.cpp), so use this only where no communicator is live.
#define DT_CHECK_NCCL(call) DT_DETAIL_CHECK("NCCL", ncclSuccess, call)

/// Non-throwing variants: print a warning to stderr and continue (destructors, noexcept paths).
#define DT_CHECK_CUDA_NOTHROW(call) DT_DETAIL_CHECK_NOTHROW("CUDA", cudaSuccess, call)
#define DT_CHECK_CUDNN_NOTHROW(call) DT_DETAIL_CHECK_NOTHROW("cuDNN", CUDNN_STATUS_SUCCESS, call)
#define DT_CHECK_CUBLAS_NOTHROW(call) DT_DETAIL_CHECK_NOTHROW("cuBLAS", CUBLAS_STATUS_SUCCESS, call)
#define DT_CHECK_NCCL_NOTHROW(call) DT_DETAIL_CHECK_NOTHROW("NCCL", ncclSuccess, call)

/// Checks the last kernel launch (launch configuration errors); does not synchronize.
#define DT_CHECK_LAUNCH() DT_CHECK_CUDA(cudaGetLastError())
