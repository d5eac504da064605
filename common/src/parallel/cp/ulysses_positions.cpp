// The positions of a head-sharded tensor's rows under Ulysses (ulysses.h): the all-to-all
// puts rank 0's positions first, then rank 1's, ... so under the zigzag split the whole
// sequence arrives in an order that is not ascending, and the causal mask needs each
// row's true position.
#include "mgpu/parallel/cp/ulysses.h"

namespace mgpu::parallel::cp {

std::vector<std::int64_t> ulysses_positions(std::int64_t T, int P, Split split) {
  std::vector<std::int64_t> pos;
  pos.reserve(static_cast<std::size_t>(T));
  for (int j = 0; j < P; ++j) {
    const std::vector<std::int64_t> mine = sequence_positions(T, P, j, split);
    pos.insert(pos.end(), mine.begin(), mine.end());
  }
  return pos;
}

}  // namespace mgpu::parallel::cp
