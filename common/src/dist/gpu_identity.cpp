// PCI bus ids: how ranks on one node find out whether they share a GPU.
#include "gpu_identity.h"

#ifdef MGPU_WITH_CUDA
#include "core/cuda_check.h"
#endif

namespace mgpu::dist::detail {

std::string gpu_bus_id(const Device& d) {
#ifdef MGPU_WITH_CUDA
  if (!d.is_cuda() || !cuda_available()) return "";
  char id[64] = {0};
  MGPU_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, physical_gpu(d)));
  return id;
#else
  (void)d;
  return "";
#endif
}

}  // namespace mgpu::dist::detail
