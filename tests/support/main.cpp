// The Catch2 runner every test binary links. Beyond Catch2's own options it takes
//   --require-gpu   run only if a GPU is present; otherwise print why and exit 77, the
//                   code meson and tools/grade report as "skipped" (never as passed).
//   --require-gpus N  the same, for cases that need N GPUs (what goes wrong across GPUs).
// Catch2's listener interfaces alone; its implementation is compiled once, in
// catch_session.cpp.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "catch_session.h"
#include "grade_listener.h"
#include "mgpu/device.h"

using mgpu::testing::GradeRecordListener;
CATCH_REGISTER_LISTENER(GradeRecordListener)

int main(int argc, char** argv) {
  std::vector<char*> args;
  int gpus_needed = 0;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-gpu") == 0) {
      gpus_needed = 1;
    } else if (std::strcmp(argv[i], "--require-gpus") == 0 && i + 1 < argc) {
      gpus_needed = std::atoi(argv[++i]);
    } else {
      args.push_back(argv[i]);
    }
  }
  if (gpus_needed > 0 && !mgpu::cuda_available()) {
    std::printf("SKIPPED: GPU tests not run: %s\n",
                mgpu::built_with_cuda() ? "no CUDA GPU is visible on this machine"
                                        : "this build has no CUDA backend (-Dcuda=disabled or no nvcc)");
    return 77;
  }
  if (mgpu::cuda_device_count() < gpus_needed) {
    std::printf("SKIPPED: these GPU tests need %d GPUs; %d visible on this machine\n", gpus_needed,
                mgpu::cuda_device_count());
    return 77;
  }
  return mgpu::testing::run_catch_session(static_cast<int>(args.size()), args.data());
}
