// matmul on CUDA: cuBLAS, which is column-major, computing our row-major product.
//
// The trick: a row-major [R, C] matrix read as column-major is its transpose, [C, R].
// We want C = op(A) op(B) in row-major, which cuBLAS sees as C^T. And
//     C^T = (op(A) op(B))^T = op(B)^T op(A)^T,
// where op(B)^T and op(A)^T are exactly what cuBLAS sees in B's and A's memory (before
// applying our trans flags). So we ask cuBLAS for the product "B times A" with the flags
// unchanged, m and n swapped, and each leading dimension = the row length of the stored
// row-major matrix. Nothing is copied or transposed in memory.
#include "cuda_util.cuh"
#include "ops_cuda.h"

namespace mgpu::detail {

void gemm_cuda(Tensor& c, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
               std::int64_t m, std::int64_t n, std::int64_t k, double alpha, double beta) {
  cudaStream_t stream = launch_stream(c.device());
  cublasHandle_t handle = cublas_handle(c.device(), stream);
  const cublasOperation_t op_b = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;  // first operand: B
  const cublasOperation_t op_a = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;  // second operand: A
  const int cm = static_cast<int>(n);  // rows of C^T = columns of C
  const int cn = static_cast<int>(m);
  const int ck = static_cast<int>(k);
  const int ldb = static_cast<int>(b.size(1));
  const int lda = static_cast<int>(a.size(1));
  const int ldc = static_cast<int>(n);
  switch (a.dtype()) {  // the operands' dtype (C is a's, or f32 for 16-bit operands)
    case DType::f32: {
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      MGPU_CUBLAS_CHECK(cublasSgemm(handle, op_b, op_a, cm, cn, ck, &al, device_ptr<float>(b), ldb,
                                    device_ptr<float>(a), lda, &be, device_ptr<float>(c), ldc));
      break;
    }
    case DType::f64: {
      MGPU_CUBLAS_CHECK(cublasDgemm(handle, op_b, op_a, cm, cn, ck, &alpha, device_ptr<double>(b),
                                    ldb, device_ptr<double>(a), lda, &beta, device_ptr<double>(c),
                                    ldc));
      break;
    }
    case DType::f16:
    case DType::bf16: {
      // 16-bit inputs, products accumulated in float (CUBLAS_COMPUTE_32F, which also lets
      // cuBLAS use tensor cores); alpha and beta are then floats too. C is 16-bit, or f32
      // for the mixed-precision GEMM of the autocast policy: the f32 sums are kept as they
      // are, so a gradient accumulated into an f32 .grad (beta = 1) is never rounded to 16 bits.
      const cudaDataType_t type = a.dtype() == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
      const cudaDataType_t c_type = c.dtype() == DType::f32 ? CUDA_R_32F : type;
      const float al = static_cast<float>(alpha), be = static_cast<float>(beta);
      MGPU_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, cm, cn, ck, &al, b.raw_data(), type, ldb,
                                     a.raw_data(), type, lda, &be, c.raw_data(), c_type, ldc,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      break;
    }
    default:
      MGPU_FAIL("matmul: dtype ", dtype_name(c.dtype()), " is not supported");
  }
}

}  // namespace mgpu::detail
