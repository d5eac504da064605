// Private: which physical GPU a rank's device is, as the whole node can compare it.
#pragma once

#include <string>

#include "mgpu/device.h"

namespace mgpu::dist::detail {

/// The PCI bus id of d's physical GPU ("0000:3B:00.0"): unique on a node even when each
/// rank sees a different CUDA_VISIBLE_DEVICES. Empty without CUDA or without a GPU.
std::string gpu_bus_id(const Device& d);

}  // namespace mgpu::dist::detail
