/// @file copy.h
/// @brief Copies between any two devices, synchronous or on a stream.
#pragma once

#include "mgpu/stream.h"
#include "mgpu/tensor.h"

namespace mgpu {

/// dst <- src for same-shaped (same numel) tensors of the same dtype on any two devices.
/// Returns when the copy is complete and visible to the host; within one GPU it is queued
/// on the device's current stream instead, ordered before the kernels queued after it there
/// (as an op's output is), and returns at once.
void copy_(Tensor& dst, const Tensor& src);
/// As copy_, but queued on `stream` (a stream of the GPU side) and returned at once.
/// Truly asynchronous for device<->device copies and for host<->device copies whose host
/// side is pinned (Tensor::empty_pinned); otherwise it falls back to a synchronous copy.
/// The host buffer must stay alive and unchanged until the stream has run the copy.
void copy_async(Tensor& dst, const Tensor& src, const Stream& stream);

}  // namespace mgpu
