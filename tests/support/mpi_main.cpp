// The Catch2 runner of multi-rank test binaries, started under mpirun (or alone: a world
// of 1). Every rank runs the same test cases in the same order, so their collectives match.
//  - A test binary passes only if every rank passes: the ranks' results are combined with
//    MPI_Allreduce and every rank exits with the same code.
//  - Rank 0's reporter writes to stdout as usual; the other ranks' reporter output goes to
//    a file, and the output of a rank that failed is printed by rank 0, each line prefixed
//    "[rank r]".
//  - --require-gpu: as in main.cpp, exit 77 (skipped) on every rank where no GPU is present.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/dist/runtime.h"

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rank 0 receives the text of every rank that failed and prints it line by line with the
// rank in front, in rank order.
void print_failed_ranks(const std::string& mine, bool failed) {
  int rank = mgpu::dist::rank(), size = mgpu::dist::world_size();
  int len = failed ? static_cast<int>(mine.size()) : 0;
  std::vector<int> lens(size), offsets(size, 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lens[r];
  }
  std::vector<char> all(static_cast<std::size_t>(total) + 1);
  MPI_Gatherv(failed ? mine.data() : nullptr, len, MPI_CHAR, all.data(), lens.data(),
              offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  if (rank != 0) return;
  for (int r = 1; r < size; ++r) {
    if (lens[r] == 0) continue;
    std::istringstream text(std::string(all.data() + offsets[r], lens[r]));
    std::string line;
    std::printf("\n[rank %d] ---- this rank failed; its report follows ----\n", r);
    while (std::getline(text, line)) std::printf("[rank %d] %s\n", r, line.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  mgpu::dist::init(&argc, &argv);
  std::vector<char*> args;
  bool require_gpu = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--require-gpu") == 0) {
      require_gpu = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  const int rank = mgpu::dist::rank();
  if (require_gpu && !mgpu::cuda_available()) {
    if (rank == 0)
      std::printf("SKIPPED: GPU tests not run: %s\n",
                  mgpu::built_with_cuda() ? "no CUDA GPU is visible on this machine"
                                          : "this build has no CUDA backend (-Dcuda=disabled or no nvcc)");
    mgpu::dist::finalize();
    return 77;
  }

  std::string report_path;
  int failed = 0;
  {
    Catch::Session session;
    int rc = session.applyCommandLine(static_cast<int>(args.size()), args.data());
    if (rc == 0) {
      if (rank != 0) {
        report_path = "/tmp/mgpu-test-rank" + std::to_string(rank) + "-" +
                      std::to_string(static_cast<long>(getpid())) + ".txt";
        session.configData().outputFilename = report_path;
        session.configData().useColour = Catch::UseColour::No;  // it is read as text later
      }
      failed = session.run();
    } else {
      failed = rc;
    }
  }  // the session (and its report file) is closed here

  std::string report = report_path.empty() ? "" : read_file(report_path);
  if (!report_path.empty()) std::remove(report_path.c_str());
  print_failed_ranks(report, failed != 0);

  // Every rank exits with the same code: non-zero if any rank failed.
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != 0 && failed == 0)
    std::printf("FAILED: rank 0 passed, but another rank failed (see its report above)\n");
  mgpu::dist::finalize();
  return worst > 255 ? 255 : worst;
}
