// How app::run_distributed ends a job whose body throws (run by expect_failure.py under
// mpirun):
//   app_exit_probe alike   every rank throws the same error: rank 0 prints it once and every
//                          rank exits cleanly with status 1 (no MPI_Abort)
//   app_exit_probe alone   only the last rank throws while the others wait in a barrier:
//                          that rank's error, with its rank, and the job is aborted
#include <string>

#include "mgpu/app/run.h"
#include "mgpu/dist/dist.h"
#include "mgpu/error.h"

using namespace mgpu;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  return app::run_distributed(&argc, &argv, [&]() -> int {
    if (mode == "alike") MGPU_FAIL("every rank finds this (a wrong flag, say)");
    if (mode == "alone" && dist::rank() == dist::world_size() - 1)
      MGPU_FAIL("only the last rank finds this");
    dist::GroupOptions o;
    o.announce = false;
    auto pg = dist::new_group("mpi", Device::cpu(), o);
    pg->barrier().wait();  // the last rank never comes: it aborts the job
    return 0;
  });
}
