/// @file threads.h
/// @brief How many CPU threads the library's CPU ops use.
///
/// Two pools do the work on the CPU: OpenMP threads run the library's own loops
/// (elementwise, reductions, im2col, batch norm, pooling, the loss), and OpenBLAS's pool
/// runs the matrix products. set_num_threads() sets both, the way torch.set_num_threads
/// sets PyTorch's. The default is OMP_NUM_THREADS, else the machine's cores.
///
/// The library's loops give the same bits whatever the thread count: a loop is split into
/// chunks only where each output is computed on its own, in a fixed order. The matrix
/// products are OpenBLAS's: on the machine we measured, f32 gave the same bits with 1, 2
/// and 3 threads, f64 with 1 and 2 threads but not with 3 (OpenBLAS's own partitioning).
#pragma once

#include <string>

namespace mgpu {

/// Threads for the CPU ops from now on (OpenMP loops and OpenBLAS); n >= 1.
void set_num_threads(int n);
/// Threads the CPU ops use.
int num_threads();
/// One line for a benchmark's header: the thread counts, OMP_WAIT_POLICY, the BLAS and its
/// kernels (e.g. "2 threads (OpenMP); OMP_WAIT_POLICY=PASSIVE; OpenBLAS 0.3.21, Cooperlake
/// kernels, 2 threads").
std::string cpu_threading_summary();

}  // namespace mgpu
