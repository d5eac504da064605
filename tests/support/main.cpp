// The Catch2 runner every test binary links. Beyond Catch2's own options it takes
//   --require-gpu   run only if a GPU is present; otherwise print why and exit 77, the
//                   code meson and tools/grade report as "skipped" (never as passed).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>
#include <vector>

#include "mgpu/device.h"

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_gpu = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-gpu") == 0) {
      require_gpu = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (require_gpu && !mgpu::cuda_available()) {
    std::printf("SKIPPED: GPU tests not run: %s\n",
                mgpu::built_with_cuda() ? "no CUDA GPU is visible on this machine"
                                        : "this build has no CUDA backend (-Dcuda=disabled or no nvcc)");
    return 77;
  }
  return Catch::Session().run(static_cast<int>(args.size()), args.data());
}
