// Step 0 of a multi-rank program (see ranks.h).
#include "mgpu/app/ranks.h"

#include "mgpu/dist/runtime.h"

namespace mgpu::app {

std::shared_ptr<dist::ProcessGroup> quiet_cpu_group() {
  dist::GroupOptions quiet;
  quiet.announce = false;
  return dist::new_group("mpi", Device::cpu(), quiet);
}

Ranks init_ranks(const Options& opt) {
  Ranks r;
  r.rank = dist::rank();
  r.world = dist::world_size();
  r.device = dist::rank_device(opt.device);
  r.group = &dist::init_process_group(opt.backend, r.device);
  r.cpu_group = quiet_cpu_group();  // after the default group, in the same order on every rank
  return r;
}

}  // namespace mgpu::app
