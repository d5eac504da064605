// A small multi-rank program that misbehaves on purpose, for the tests that check a stuck
// or inconsistent job ends with a clear message instead of hanging (run by
// expect_failure.py under mpirun).
//   dist_fault_probe skip      the last rank skips the 2nd all_reduce: the others time out
//   dist_fault_probe mismatch  the last rank's tensor has another shape (MGPU_DIST_DEBUG=1)
#include <chrono>
#include <cstring>
#include <thread>

#include "mgpu/dist/dist.h"
#include "mgpu/tensor.h"

using namespace mgpu;

int main(int argc, char** argv) {
  dist::Runtime runtime(&argc, &argv);
  const char* mode = argc > 1 ? argv[1] : "";
  dist::GroupOptions o;
  o.announce = false;
  auto pg = dist::new_group("mpi", Device::cpu(), o);
  const bool last = pg->rank() == pg->size() - 1;
  try {
    if (std::strcmp(mode, "skip") == 0) {
      Tensor t = Tensor::from_vector(std::vector<float>(1000, 1.0f), {1000});
      pg->all_reduce(t).wait();
      if (last) {
        dist::log_all("skipping all_reduce #2 on purpose");
        std::this_thread::sleep_for(std::chrono::seconds(120));  // ended by the others' abort
      } else {
        pg->all_reduce(t).wait();
      }
      dist::log_all("error: the skipped collective did not time out");
      return 0;  // reached only if the watchdog failed: the driver sees exit 0 and fails
    }
    if (std::strcmp(mode, "mismatch") == 0) {
      std::int64_t n = last ? 12 : 10;
      Tensor t = Tensor::from_vector(std::vector<float>(n, 1.0f), {n});
      pg->all_reduce(t).wait();
      dist::log_all("error: the shape mismatch went unnoticed");
      return 0;
    }
  } catch (const Error& e) {
    dist::log_error(e.what());
    return 1;
  }
  dist::log_error("usage: dist_fault_probe skip|mismatch");
  return 2;
}
