// The process-wide initialisation seed sequence.
#include "mgpu/nn/init.h"

#include <atomic>

#include "mgpu/ops.h"
#include "mgpu/rng.h"

namespace mgpu::nn {

namespace {
std::atomic<std::uint64_t> g_base_seed{0};
std::atomic<std::uint64_t> g_counter{0};
}  // namespace

void manual_seed(std::uint64_t seed) {
  g_base_seed = seed;
  g_counter = 0;
}

std::uint64_t next_seed() { return mix_seed(g_base_seed.load(), g_counter++); }

SeedSequenceState seed_sequence_state() { return {g_base_seed.load(), g_counter.load()}; }

void set_seed_sequence_state(const SeedSequenceState& state) {
  g_base_seed = state.base;
  g_counter = state.drawn;
}

void uniform_init_(Tensor& t, double bound) { uniform_(t, next_seed(), -bound, bound); }

}  // namespace mgpu::nn
