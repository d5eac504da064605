/// @file threads.h
/// @brief How many CPU threads the library's CPU ops use.
///
/// One pool of threads does the work on the CPU: the library's own loops (elementwise, so
/// SGD's update too, reductions, im2col, batch norm, pooling; the loss and AdamW's fused
/// update are small and stay on one thread) and the matrix products, which are cut into
/// blocks of rows, one single-threaded OpenBLAS call each. set_num_threads() sets its
/// size, the way torch.set_num_threads sets PyTorch's. The default is OMP_NUM_THREADS (the
/// variable every launcher sets; the pool is not OpenMP's), else the cores this process
/// may run on.
///
/// Between two loops an idle thread spins for MGPU_SPIN_US microseconds (100 by default),
/// giving its core to any other thread that wants it, and then sleeps. The ops of a
/// training step follow each other microseconds apart, and waking a sleeping thread costs
/// tens of microseconds; MGPU_SPIN_US=0 makes idle threads sleep at once.
///
/// Results do not depend on the thread count: a loop is split into chunks only where each
/// output is computed on its own, in a fixed order, and a product's blocks depend on its
/// shapes alone.
#pragma once

#include <string>

namespace mgpu {

/// Threads for the CPU ops from now on (loops and matrix products); n >= 1.
void set_num_threads(int n);
/// Threads the CPU ops use.
int num_threads();
/// OpenBLAS's own threads for the next BLAS calls (no-op with another BLAS). The library
/// runs OpenBLAS one thread per call and splits products among its own threads; only a
/// benchmark's baseline that calls BLAS directly raises this, and sets it back to 1 after.
void set_blas_threads(int n);
/// One line for a benchmark's header: the thread count, the spin, the BLAS and its kernels
/// (e.g. "2 threads (mgpu's pool; an idle thread spins 100 us, then sleeps: MGPU_SPIN_US);
/// OpenBLAS 0.3.21, Cooperlake kernels, one thread per call (the products are split among
/// ours)").
std::string cpu_threading_summary();

}  // namespace mgpu
