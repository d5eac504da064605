// dtype and reduce-op mapping onto MPI, including MPI user ops for f16 and bf16, which MPI
// has no type for: they travel as 16-bit integers and are combined through float.
#include "mpi_util.h"

#include <algorithm>
#include <climits>

#include "dispatch.h"

namespace mgpu::dist::detail {

using ::mgpu::detail::dispatch_floating;
using ::mgpu::detail::from_compute;
using ::mgpu::detail::to_compute;

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(len));
}

MPI_Datatype mpi_datatype(DType t) {
  switch (t) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::f16:
    case DType::bf16: return MPI_UINT16_T;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
  }
  MGPU_FAIL("mpi_datatype: unknown dtype");
}

namespace {

// MPI user op: inout[i] = in[i] (op) inout[i], for `*len` elements of 16-bit float T.
template <typename T, ReduceOp Op>
void combine16(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = to_compute(a[i]), y = to_compute(b[i]);
    float r = Op == ReduceOp::max ? std::max(x, y) : Op == ReduceOp::min ? std::min(x, y) : x + y;
    b[i] = from_compute<T>(r);
  }
}

// [dtype f16/bf16][sum, max, min]
MPI_Op user_ops[2][3] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                         {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};

int op_slot(ReduceOp op) {
  return op == ReduceOp::max ? 1 : op == ReduceOp::min ? 2 : 0;  // avg reduces with sum
}

}  // namespace

void create_user_ops() {
  if (user_ops[0][0] != MPI_OP_NULL) return;
  // commute = 1: all three are commutative, which lets MPI pick any reduction order.
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<half, ReduceOp::sum>, 1, &user_ops[0][0]));
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<half, ReduceOp::max>, 1, &user_ops[0][1]));
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<half, ReduceOp::min>, 1, &user_ops[0][2]));
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<bfloat16, ReduceOp::sum>, 1, &user_ops[1][0]));
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<bfloat16, ReduceOp::max>, 1, &user_ops[1][1]));
  MGPU_MPI_CHECK(MPI_Op_create(&combine16<bfloat16, ReduceOp::min>, 1, &user_ops[1][2]));
}

void free_user_ops() {
  for (auto& row : user_ops)
    for (MPI_Op& op : row)
      if (op != MPI_OP_NULL) MPI_Op_free(&op);
}

MPI_Op mpi_op(ReduceOp op, DType t) {
  if (t == DType::f16 || t == DType::bf16) {
    MPI_Op o = user_ops[t == DType::f16 ? 0 : 1][op_slot(op)];
    MGPU_CHECK(o != MPI_OP_NULL, "mpi_op: mgpu::dist::init() has not been called");
    return o;
  }
  switch (op) {
    case ReduceOp::sum:
    case ReduceOp::avg: return MPI_SUM;
    case ReduceOp::max: return MPI_MAX;
    case ReduceOp::min: return MPI_MIN;
  }
  return MPI_SUM;
}

void divide_host(void* data, DType t, std::int64_t n, int divisor) {
  dispatch_floating(t, "all_reduce(avg)", [&](auto tag) {
    using T = decltype(tag);
    T* p = static_cast<T*>(data);
    for (std::int64_t i = 0; i < n; ++i)
      p[i] = from_compute<T>(static_cast<double>(to_compute(p[i])) / divisor);
  });
}

int mpi_count(std::int64_t numel, const char* op) {
  MGPU_CHECK(numel <= INT_MAX, op, ": ", numel,
             " elements exceed MPI's int count; split the tensor into parts below 2^31 elements");
  return static_cast<int>(numel);
}

}  // namespace mgpu::dist::detail
