// Private: checking CUDA and cuBLAS calls, and the stream an op should launch on.
// Included only by files compiled with MGPU_WITH_CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

#include "core/status_check.h"
#include "mgpu/error.h"
#include "mgpu/stream.h"

namespace mgpu::detail {
/// CUDA's name and explanation of a status: "cudaErrorX (text)".
inline std::string cuda_error_text(cudaError_t err) {
  return std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ")";
}
}  // namespace mgpu::detail

/// Every CUDA runtime call goes through this: a failure throws mgpu::Error with the call,
/// the file and line, and CUDA's own explanation.
#define MGPU_CUDA_CHECK(call)                                                      \
  MGPU_CHECK_STATUS("CUDA", cudaError_t, cudaSuccess, ::mgpu::detail::cuda_error_text, \
                    #call, call)

/// After a kernel launch: reports bad launch configurations at once (not at the next sync).
#define MGPU_CUDA_CHECK_LAUNCH() MGPU_CUDA_CHECK(cudaGetLastError())

#define MGPU_CUBLAS_CHECK(call)                                                            \
  MGPU_CHECK_STATUS("cuBLAS", cublasStatus_t, CUBLAS_STATUS_SUCCESS, cublasGetStatusString, \
                    #call, call)

namespace mgpu::detail {
/// The cudaStream_t ops on `d` should launch on now (Stream::current), with d's GPU made
/// current for the calling thread.
cudaStream_t launch_stream(const Device& d);
/// The cuBLAS handle of d's physical GPU, bound to `stream`.
cublasHandle_t cublas_handle(const Device& d, cudaStream_t stream);
}  // namespace mgpu::detail
