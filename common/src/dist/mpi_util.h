// Private: checking MPI calls, and how mgpu dtypes and reduce ops map onto MPI's.
#pragma once

#include "mpi_include.h"

#include <cstdint>
#include <string>

#include "core/status_check.h"
#include "mgpu/dist/process_group.h"
#include "mgpu/dtype.h"
#include "mgpu/error.h"

/// Every MPI call goes through this: a failure throws mgpu::Error with the call and MPI's text.
/// (MPI's default handler would abort instead; init() sets MPI_ERRORS_RETURN on our comms.)
#define MGPU_MPI_CHECK(call)                                                           \
  MGPU_CHECK_STATUS("MPI", int, MPI_SUCCESS, ::mgpu::dist::detail::mpi_error_string, #call, \
                    call)

namespace mgpu::dist::detail {

std::string mpi_error_string(int code);

/// The MPI datatype that carries `t` (16-bit floats travel as MPI_UINT16_T).
MPI_Datatype mpi_datatype(DType t);
/// The MPI_Op that reduces `t` with `op` (avg reduces with sum; the caller divides).
/// 16-bit floats use user-defined ops that add/compare through float.
MPI_Op mpi_op(ReduceOp op, DType t);
/// Creates / frees the user-defined ops (called by init() and finalize()).
void create_user_ops();
void free_user_ops();

/// data[i] /= divisor for `n` host elements of dtype `t` (the second half of avg).
void divide_host(void* data, DType t, std::int64_t n, int divisor);

/// Element counts must fit MPI's int.
int mpi_count(std::int64_t numel, const char* op);

}  // namespace mgpu::dist::detail
