// matmul_batched on CUDA: one strided-batched cuBLAS call for all the products. Each entry
// is the row-major product of matmul.cu (cuBLAS computes C^T = op(B)^T op(A)^T in its
// column-major view), and entry i starts i · (rows × columns) elements after entry 0.
#include "cuda_util.cuh"
#include "ops/matmul_batched_cuda.h"

namespace mgpu::detail {

void gemm_batched_cuda(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
                       std::int64_t batch, std::int64_t m, std::int64_t n, std::int64_t k,
                       double alpha, double beta) {
  cudaStream_t stream = launch_stream(c.device());
  cublasHandle_t handle = cublas_handle(c.device(), stream);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int cm = static_cast<int>(n), cn = static_cast<int>(m), ck = static_cast<int>(k);
  const int ldb = static_cast<int>(b.size(2)), lda = static_cast<int>(a.size(2));
  const int ldc = static_cast<int>(n);
  const long long stride_a = a.size(1) * a.size(2), stride_b = b.size(1) * b.size(2);
  const long long stride_c = m * n;
  const int count = static_cast<int>(batch);
  MGPU_CHECK(batch <= 2147483647 && m <= 2147483647 && n <= 2147483647 && k <= 2147483647,
             "matmul_batched: sizes exceed the 32-bit counts cuBLAS takes");
  switch (a.dtype()) {
    case DType::f32: {
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      MGPU_CUBLAS_CHECK(cublasSgemmStridedBatched(
          handle, op_b, op_a, cm, cn, ck, &al, device_ptr<float>(b), ldb, stride_b,
          device_ptr<float>(a), lda, stride_a, &be, device_ptr<float>(c), ldc, stride_c, count));
      break;
    }
    case DType::f64: {
      MGPU_CUBLAS_CHECK(cublasDgemmStridedBatched(
          handle, op_b, op_a, cm, cn, ck, &alpha, device_ptr<double>(b), ldb, stride_b,
          device_ptr<double>(a), lda, stride_a, &beta, device_ptr<double>(c), ldc, stride_c,
          count));
      break;
    }
    case DType::f16:
    case DType::bf16: {
      // 16-bit operands and result, products accumulated in float, as matmul.cu.
      const cudaDataType_t type = a.dtype() == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      MGPU_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, op_b, op_a, cm, cn, ck, &al, b.raw_data(), type, ldb, stride_b, a.raw_data(),
          type, lda, stride_a, &be, c.raw_data(), type, ldc, stride_c, count, CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
      break;
    }
    default:
      MGPU_FAIL("matmul_batched: dtype ", dtype_name(a.dtype()), " is not supported");
  }
}

}  // namespace mgpu::detail
