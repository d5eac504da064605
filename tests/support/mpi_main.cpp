// The Catch2 runner of multi-rank test binaries, started under mpirun (or alone: a world
// of 1). Every rank runs the same test cases in the same order, so their collectives match.
//  - After each case the ranks combine their outcomes (a listener, below): a case that
//    failed on another rank is marked failed on rank 0 too, and that rank's failures are
//    added to the case's output. Catch2 counts its closing totals line itself, so where
//    only another rank failed, that line may still say the cases passed: the exit code and
//    the "FAILED: rank 0 passed, but another rank failed" line below are what count.
//  - A test binary passes only if every rank passes: the ranks' results are combined with
//    MPI_Allreduce and every rank exits with the same code.
//  - Rank 0's reporter writes to stdout as usual; the other ranks' reporter output goes to
//    a file, and the output of a rank that failed is printed by rank 0, each line prefixed
//    "[rank r]".
//  - --require-gpu: as in main.cpp, exit 77 (skipped) on every rank where no GPU is present.
// Catch2's listener interfaces alone; its implementation is compiled once, in
// catch_session.cpp.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
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

#include "catch_session.h"
#include "grade_listener.h"
#include "mgpu/device.h"
#include "mgpu/dist/runtime.h"

namespace {

// Gathers every rank's `text` on rank 0, in rank order (empty elsewhere).
std::vector<std::string> gather_text(const std::string& text) {
  int rank = mgpu::dist::rank(), size = mgpu::dist::world_size();
  int len = static_cast<int>(text.size());
  std::vector<int> lens(size), offsets(size, 0);
  MPI_Gather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[r] = total;
    total += lens[r];
  }
  std::vector<char> all(static_cast<std::size_t>(total) + 1);
  MPI_Gatherv(text.data(), len, MPI_CHAR, all.data(), lens.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.emplace_back(all.data() + offsets[r], lens[r]);
  return out;
}

// True when `text` of rank r says what `rank0` says, apart from the rank prefixes.
bool same_but_rank(std::string text, int r, const std::string& rank0) {
  const std::string mine = "[rank " + std::to_string(r) + "] ", zero = "[rank 0] ";
  for (std::size_t at = text.find(mine); at != std::string::npos; at = text.find(mine, at))
    text.replace(at, mine.size(), zero), at += zero.size();
  return text == rank0;
}

// After each test case, every rank learns whether any rank failed it. Every rank runs the
// same cases in the same order, so these collectives pair up like the tests' own. A case
// that failed elsewhere is marked failed here too, before the reporter sees it (listeners
// run first), and rank 0 adds the other ranks' failures to the case's captured output.
class AllRanksListener : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    failures_.clear();
    TestEventListenerBase::testCaseStarting(info);
  }

  bool assertionEnded(const Catch::AssertionStats& stats) override {
    const Catch::AssertionResult& r = stats.assertionResult;
    if (r.isOk()) return true;
    std::ostringstream os;
    os << "[rank " << mgpu::dist::rank() << "] " << r.getSourceInfo().file << ":"
       << r.getSourceInfo().line << ": FAILED";
    if (r.hasExpression()) os << ": " << r.getExpressionInMacro();
    if (r.hasExpandedExpression()) os << " with expansion: " << r.getExpandedExpression();
    if (r.hasMessage()) os << " (" << r.getMessage() << ")";
    for (const auto& info : stats.infoMessages) os << " [" << info.message << "]";
    failures_ += os.str() + "\n";
    return true;
  }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    int failed_here = stats.totals.assertions.failed > 0 ? 1 : 0, failed_anywhere = 0;
    MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    std::vector<std::string> texts = gather_text(failed_here ? failures_ : std::string());
    if (failed_anywhere && !failed_here) {
      // The stats object is the run's temporary, not a const object: marking it is defined.
      auto& totals = const_cast<Catch::Totals&>(stats.totals);
      totals.assertions.failed += 1;
      totals.testCases.failed = 1;
      totals.testCases.passed = 0;
    }
    // Other ranks' failures, unless they only repeat rank 0's (the common case: every rank
    // failed the same check the same way).
    std::string others;
    for (std::size_t r = 1; r < texts.size(); ++r)
      if (!texts[r].empty() && !same_but_rank(texts[r], static_cast<int>(r), texts[0]))
        others += texts[r];
    if (!others.empty()) const_cast<std::string&>(stats.stdOut) += others;
    TestEventListenerBase::testCaseEnded(stats);
  }

 private:
  std::string failures_;
};

}  // namespace

CATCH_REGISTER_LISTENER(AllRanksListener)
using mgpu::testing::GradeRecordListener;
CATCH_REGISTER_LISTENER(GradeRecordListener)

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Rank 0 prints the report of every other rank that failed, each line prefixed with its
// rank, in rank order.
void print_failed_ranks(const std::string& mine, bool failed) {
  std::vector<std::string> texts = gather_text(failed ? mine : std::string());
  for (std::size_t r = 1; r < texts.size(); ++r) {
    if (texts[r].empty()) continue;
    std::istringstream text(texts[r]);
    std::string line;
    std::printf("\n[rank %zu] ---- this rank failed; its report follows ----\n", r);
    while (std::getline(text, line)) std::printf("[rank %zu] %s\n", r, line.c_str());
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
  if (rank != 0)
    report_path = "/tmp/mgpu-test-rank" + std::to_string(rank) + "-" +
                  std::to_string(static_cast<long>(getpid())) + ".txt";
  const int failed = mgpu::testing::run_catch_session(static_cast<int>(args.size()), args.data(),
                                                      report_path);

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
