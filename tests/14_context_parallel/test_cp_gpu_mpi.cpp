// Lesson 14 on a GPU under mpirun: the GPU twins of the ring (tasks 3 and 4) and of Ulysses
// (task 5). q, k, v live
// on each rank's GPU, the group is the mpi backend's (CUDA tensors staged through pinned
// host memory, so ranks may share one GPU); the reference is full attention in f64 on the
// CPU. Skipped where no GPU is visible.
#include "cp_test_util.h"

using namespace cp_test;

namespace {

void check_on_gpu(bool backward) {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  dist::ProcessGroup& g = rank_gpu_group();
  const int P = g.size(), r = g.rank();
  auto [q, k, v, dy] = whole_inputs();
  for (bool causal : {false, true})
    for (cp::Split split : {cp::Split::plain, cp::Split::zigzag}) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      const Full full = full_attention(q, k, v, dy, causal);
      const auto pos = expected_positions(kT, P, r, split);
      const Tensor qr = take_rows(q, pos).to(gpu), kr = take_rows(k, pos).to(gpu),
                   vr = take_rows(v, pos).to(gpu), dyr = take_rows(dy, pos).to(gpu);
      // The function under test goes through a log: the ring issues no collective (the
      // all-gather baseline gives the same results with collectives).
      SendLog log(g);
      dist::ProcessGroup& forward_group = backward ? g : static_cast<dist::ProcessGroup&>(log);
      const cp::CpForward f = cp::ring_attention_forward(qr, kr, vr, split, causal, forward_group);
      CHECK(f.out.device().is_cuda());
      CHECK(max_rel_diff(f.out.to(Device::cpu()), take_rows(full.y, pos)) < kTol);
      if (!backward) {
        CHECK(log.collectives == 0);
        continue;
      }
      const nn::AttentionGrads gr = cp::ring_attention_backward(dyr, qr, kr, vr, f, split, causal, log);
      CHECK(log.collectives == 0);
      CHECK(gr.dk.device().is_cuda());
      CHECK(max_rel_diff(gr.dq.to(Device::cpu()), take_rows(full.grads.dq, pos)) < kTol);
      CHECK(max_rel_diff(gr.dk.to(Device::cpu()), take_rows(full.grads.dk, pos)) < kTol);
      CHECK(max_rel_diff(gr.dv.to(Device::cpu()), take_rows(full.grads.dv, pos)) < kTol);
    }
}

// Ulysses (task 5) on CUDA tensors: forward and backward against full attention on the CPU,
// 4 all-to-alls each way.
void check_ulysses_on_gpu() {
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  dist::ProcessGroup& g = rank_gpu_group();
  const int P = g.size(), r = g.rank();
  auto [q, k, v, dy] = ulysses_whole_inputs();
  for (bool causal : {false, true})
    for (cp::Split split : {cp::Split::plain, cp::Split::zigzag}) {
      INFO("causal " << causal << ", " << cp::split_name(split));
      const Full full = full_attention(q, k, v, dy, causal);
      const auto pos = expected_positions(kT, P, r, split);
      const Tensor qr = take_rows(q, pos).to(gpu), kr = take_rows(k, pos).to(gpu),
                   vr = take_rows(v, pos).to(gpu), dyr = take_rows(dy, pos).to(gpu);
      SendLog log(g);
      const cp::UlyssesForward f = cp::ulysses_attention_forward(qr, kr, vr, kUH, split, causal, log);
      REQUIRE(f.out.defined());
      CHECK(f.out.device().is_cuda());
      CHECK(max_rel_diff(f.out.to(Device::cpu()), take_rows(full.y, pos)) < kTol);
      const nn::AttentionGrads gr = cp::ulysses_attention_backward(dyr, f, kUH, split, causal, log);
      REQUIRE(gr.dk.defined());
      CHECK(gr.dk.device().is_cuda());
      CHECK(max_rel_diff(gr.dq.to(Device::cpu()), take_rows(full.grads.dq, pos)) < kTol);
      CHECK(max_rel_diff(gr.dk.to(Device::cpu()), take_rows(full.grads.dk, pos)) < kTol);
      CHECK(max_rel_diff(gr.dv.to(Device::cpu()), take_rows(full.grads.dv, pos)) < kTol);
      CHECK(log.collective_log.size() == 8);
      for (const auto& [op, bytes] : log.collective_log) {
        CHECK(op == "all_to_all");
        CHECK(bytes == qr.nbytes());
      }
      CHECK(log.sent.empty());
    }
}

}  // namespace

TEST_CASE("gpu: task3: ring attention on CUDA equals full attention on the CPU",
          "[14_context_parallel][task3][points:1][gpu]") {
  check_on_gpu(/*backward=*/false);
}

TEST_CASE("gpu: task4: ring attention's gradients on CUDA equal full attention's on the CPU",
          "[14_context_parallel][task4][points:1][gpu]") {
  check_on_gpu(/*backward=*/true);
}

TEST_CASE("gpu: task5: Ulysses on CUDA equals full attention on the CPU, forward and backward",
          "[14_context_parallel][task5][points:1][gpu]") {
  check_ulysses_on_gpu();
}
