// Private: checking CUDA and cuBLAS calls, and the stream an op should launch on.
// Included only by files compiled with MGPU_WITH_CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "mgpu/error.h"
#include "mgpu/stream.h"

/// Every CUDA runtime call goes through this: a failure throws mgpu::Error with the call,
/// the file and line, and CUDA's own explanation.
#define MGPU_CUDA_CHECK(call)                                                         \
  do {                                                                                \
    cudaError_t err_ = (call);                                                        \
    if (err_ != cudaSuccess)                                                          \
      MGPU_FAIL("CUDA error in ", #call, " at ", __FILE__, ":", __LINE__, ": ",       \
                cudaGetErrorName(err_), " (", cudaGetErrorString(err_), ")");         \
  } while (0)

/// After a kernel launch: reports bad launch configurations at once (not at the next sync).
#define MGPU_CUDA_CHECK_LAUNCH() MGPU_CUDA_CHECK(cudaGetLastError())

#define MGPU_CUBLAS_CHECK(call)                                                       \
  do {                                                                                \
    cublasStatus_t st_ = (call);                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                                 \
      MGPU_FAIL("cuBLAS error in ", #call, " at ", __FILE__, ":", __LINE__, ": ",     \
                cublasGetStatusString(st_));                                          \
  } while (0)

namespace mgpu::detail {
/// The cudaStream_t ops on `d` should launch on now (Stream::current), with d's GPU made
/// current for the calling thread.
cudaStream_t launch_stream(const Device& d);
/// The cuBLAS handle of d's physical GPU, bound to `stream`.
cublasHandle_t cublas_handle(const Device& d, cudaStream_t stream);
}  // namespace mgpu::detail
