// Task 2: which positions of the sequence a rank keeps. The plain split gives rank r one
// contiguous block; under a causal mask the last rank then does P times the first rank's
// work. The zigzag split pairs a chunk from the head with one from the tail, so every rank
// does the same.
#include "mgpu/parallel/cp/ring_attention.h"

namespace mgpu::parallel::cp {

std::vector<std::int64_t> sequence_positions(std::int64_t T, int P, int rank, Split split) {
  MGPU_CHECK(P >= 1 && rank >= 0 && rank < P, "sequence_positions: rank ", rank, " of ", P);
  std::vector<std::int64_t> pos;
  // What you have: T (the sequence's length), P (ranks), rank; split (Split::plain or
  // Split::zigzag); MGPU_CHECK(condition, message parts...) throws mgpu::Error.
  // TODO(task2) BEGIN: chapter §4's split of the sequence: rank's positions in pos,
  // ascending, T/P of them. Invariants: over the P ranks every position appears exactly
  // once (a permutation of 0..T-1); under the causal mask the zigzag split gives every rank
  // the same number of chunk pairs to compute (2P+1). A T the split cannot cut into equal
  // chunks is refused, never cut unevenly, with the message "context parallel: T = <T> does
  // not split into <n> equal chunks over <P> ranks", n the split's number of chunks. Stuck:
  // tools/hint 14 2 (about 8 lines).
  MGPU_FAIL("TODO(task2): sequence_positions is not written yet (lessons/14_context_parallel/zigzag_positions.cpp); T = ",
            T, " over ", P, " ranks, ", split_name(split));
  // TODO(task2) END
  return pos;
}

}  // namespace mgpu::parallel::cp
