// A small multi-rank program that misbehaves on purpose, for the tests that check a stuck
// or inconsistent job ends with a clear message instead of hanging (run by
// expect_failure.py under mpirun).
//   dist_fault_probe skip       the last rank skips the 2nd all_reduce: the others time out
//   dist_fault_probe exit       the same, but the last rank goes on to dist::finalize()
//   dist_fault_probe elsewhere  the last rank all-reduces on another group instead
//   dist_fault_probe subgroup   on the group of ranks 1.., the last rank skips the 2nd one
//   dist_fault_probe send       rank 0 receives from the last rank, which never sends
//   dist_fault_probe mismatch   the last rank's tensor has another shape (MGPU_DIST_DEBUG=1)
//   dist_fault_probe crossgroup the others all-reduce on group A, the last rank on group B
//                               (MGPU_DIST_DEBUG=1: the order across groups differs)
//   dist_fault_probe dtype      the last rank all-reduces f64[128], the others f32[256] (the
//                               same bytes: MPI returns garbage; caught without debug mode)
//   dist_fault_probe reduceop   the last rank all-reduces with max, the others with sum
//   dist_fault_probe stop       the last rank issues all_reduce #2, then stops (SIGSTOP):
//                               the others' timeout names it as stopped
//   dist_fault_probe stopchain  rank r receives from rank r + 1 and the last rank stops
//                               (SIGSTOP): rank 0, whose peer runs, names the stopped rank too
//   dist_fault_probe kill       the last rank kills itself (SIGKILL) while the others wait in
//                               all_reduce #2: tools/mpirun names it
#include <chrono>
#include <csignal>
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
  auto wait_for_abort = [] { std::this_thread::sleep_for(std::chrono::seconds(120)); };
  try {
    const bool exit_early = std::strcmp(mode, "exit") == 0;
    const bool elsewhere = std::strcmp(mode, "elsewhere") == 0;
    if (std::strcmp(mode, "skip") == 0 || exit_early || elsewhere) {
      auto other = dist::new_group("mpi", Device::cpu(), o);  // group 1
      Tensor t = Tensor::from_vector(std::vector<float>(1000, 1.0f), {1000});
      pg->all_reduce(t).wait();
      if (last) {
        dist::log_all("skipping all_reduce #2 on purpose");
        if (exit_early) return 0;  // into dist::finalize(), where it waits for the others
        if (elsewhere) {
          Tensor u = Tensor::from_vector(std::vector<float>(12, 1.0f), {12});
          other->all_reduce(u).wait();  // ended by the others' abort
        }
        wait_for_abort();
      } else {
        pg->all_reduce(t).wait();
      }
      dist::log_all("error: the skipped collective did not time out");
      return 0;  // reached only if the watchdog failed: the driver sees exit 0 and fails
    }
    if (std::strcmp(mode, "subgroup") == 0) {
      std::vector<int> ranks;
      for (int r = 1; r < dist::world_size(); ++r) ranks.push_back(r);
      auto sub = dist::new_group(ranks, "mpi", Device::cpu(), o);  // group 1; none on rank 0
      Tensor t = Tensor::from_vector(std::vector<float>(8, 1.0f), {2, 4});
      if (sub) sub->all_reduce(t).wait();
      if (!sub || last) {
        if (last) dist::log_all("skipping all_reduce #2 of the sub-group on purpose");
        wait_for_abort();
      } else {
        sub->all_reduce(t).wait();
      }
      dist::log_all("error: the skipped collective did not time out");
      return 0;
    }
    if (std::strcmp(mode, "send") == 0) {
      Tensor t = Tensor::from_vector(std::vector<float>(4, 1.0f), {4});
      pg->barrier().wait();
      if (pg->rank() == 0) pg->recv(t, pg->size() - 1).wait();
      if (last) dist::log_all("skipping the send on purpose");
      wait_for_abort();
      return 0;
    }
    if (std::strcmp(mode, "tag") == 0) {
      // A message sent with another tag than the receive posts: the receive never matches.
      Tensor t = Tensor::from_vector(std::vector<float>(4, 1.0f), {4});
      pg->barrier().wait();
      if (pg->rank() == 0) pg->recv(t, pg->size() - 1, 7).wait();
      if (last) pg->send(t, 0, 8).wait();
      wait_for_abort();
      return 0;
    }
    if (std::strcmp(mode, "crossgroup") == 0) {
      auto a = dist::new_group("mpi", Device::cpu(), o);  // group 1
      auto b = dist::new_group("mpi", Device::cpu(), o);  // group 2
      std::int64_t n = last ? 12 : 10;
      Tensor t = Tensor::from_vector(std::vector<float>(n, 1.0f), {n});
      (last ? b : a)->all_reduce(t).wait();
      dist::log_all("error: the collectives on different groups went unnoticed");
      return 0;
    }
    if (std::strcmp(mode, "dtype") == 0 || std::strcmp(mode, "reduceop") == 0) {
      const bool dtype = std::strcmp(mode, "dtype") == 0;
      Tensor t = dtype && last ? Tensor::from_vector(std::vector<double>(128, 1.0), {128})
                               : Tensor::from_vector(std::vector<float>(256, 1.0f), {256});
      for (int i = 0; i < 3; ++i) pg->all_reduce(t).wait();  // agreed: no complaint
      pg->all_reduce(t, !dtype && last ? dist::ReduceOp::max : dist::ReduceOp::sum).wait();
      dist::log_all("error: the ", mode, " mismatch went unnoticed");
      return 0;
    }
    if (std::strcmp(mode, "stop") == 0) {
      Tensor t = Tensor::from_vector(std::vector<float>(1000, 1.0f), {1000});
      pg->all_reduce(t).wait();
      if (last) {
        dist::log_all("stopping myself (SIGSTOP) inside all_reduce #2 on purpose");
        dist::Work w = pg->all_reduce(t);
        std::raise(SIGSTOP);
        w.wait();
        wait_for_abort();  // resumed by mpirun's SIGCONT on its way to ending the job
      } else {
        pg->all_reduce(t).wait();
        pg->all_reduce(t).wait();
      }
      dist::log_all("error: the stopped rank went unnoticed");
      return 0;
    }
    if (std::strcmp(mode, "stopchain") == 0 || std::strcmp(mode, "kill") == 0) {
      Tensor t = Tensor::from_vector(std::vector<float>(4, 1.0f), {4});
      pg->barrier().wait();
      if (last) {
        dist::log_all(mode[0] == 'k' ? "killing myself (SIGKILL) on purpose"
                                     : "stopping myself (SIGSTOP) on purpose");
        std::raise(mode[0] == 'k' ? SIGKILL : SIGSTOP);
        wait_for_abort();
      } else if (mode[0] == 'k') {
        pg->all_reduce(t).wait();
      } else {
        // Later on the ranks nearer the stopped one: rank 0 times out first, while its peer
        // still waits.
        std::this_thread::sleep_for(std::chrono::milliseconds(1500 * pg->rank()));
        pg->recv(t, pg->rank() + 1).wait();
      }
      dist::log_all("error: the ", mode[0] == 'k' ? "killed" : "stopped", " rank went unnoticed");
      return 0;
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
  dist::log_error("usage: dist_fault_probe skip|exit|elsewhere|subgroup|send|tag|mismatch|crossgroup|dtype|reduceop|stop|stopchain|kill");
  return 2;
}
