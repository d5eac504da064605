// Private: the one shape of every library-call check (CUDA, cuBLAS, NCCL, MPI).
#pragma once

#include "mgpu/error.h"

/// Runs `call`, which returns a status of type `type`; unless the status is `ok`, throws
/// mgpu::Error "<lib> error in <text> at <file>:<line>: <explain(status)>". `text` is the
/// call as written (#call in the caller's macro, before any macro in it is expanded).
#define MGPU_CHECK_STATUS(lib, type, ok, explain, text, call)                        \
  do {                                                                               \
    type mgpu_status_ = (call);                                                      \
    if (mgpu_status_ != ok)                                                          \
      MGPU_FAIL(lib " error in ", text, " at ", __FILE__, ":", __LINE__, ": ",       \
                explain(mgpu_status_));                                              \
  } while (0)
