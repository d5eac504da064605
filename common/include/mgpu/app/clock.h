/// @file clock.h
/// @brief The one clock of every program: seconds on the host's steady clock.
#pragma once

namespace mgpu::app {

/// Seconds on std::chrono::steady_clock (monotonic, unaffected by changes to the wall
/// clock). Every duration a program prints and every span of a trace is measured on it, so
/// times taken in different places (the step loop, a comm hook, a worker thread) compare.
/// parallel::clock_s() (CommLog's bucket times) and dist::Work's completion times read
/// the same clock: their times go into a Trace unchanged.
/// On a GPU it reads the host's time: wait for the device (mgpu::synchronize) before
/// reading it where the GPU's work must be inside the interval.
double now_s();

}  // namespace mgpu::app
