// Private: the pool of worker threads that runs the CPU ops' loops (threads.cpp).
//
// One job at a time: the caller hands out chunks 1..n-1 to workers 1..n-1, runs chunk 0
// itself and waits until all are done. Between jobs a worker spins for a short while
// (MGPU_SPIN_US microseconds, yielding the core to anything else that wants it), then
// sleeps until the next job. The spin is the point of having our own pool: the ops of a
// training step follow each other a few microseconds apart, and waking a sleeping thread
// costs tens of microseconds on a virtual machine, which OpenMP under
// OMP_WAIT_POLICY=PASSIVE paid on every loop.
#pragma once

#include <cstdint>

namespace mgpu::detail {

/// One chunk of a job: fn(body, chunk).
using ChunkFn = void (*)(void* body, int chunk);

/// Runs fn(body, c) for c in [0, chunks), chunk 0 on the calling thread, and returns true
/// after all have returned. Returns false without running anything when the pool is busy
/// with another thread's job, or when called from inside a job: run it on this thread then.
/// fn must not throw.
bool pool_run(int chunks, ChunkFn fn, void* body);

/// How long an idle worker spins before it sleeps, in microseconds (MGPU_SPIN_US, else
/// the default in thread_pool.cpp).
int pool_spin_us();

}  // namespace mgpu::detail
