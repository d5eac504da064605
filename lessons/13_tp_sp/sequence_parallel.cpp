// Task 3: sequence parallelism's pair of collectives. Under SP the LayerNorm regions keep
// only this rank's T/P tokens; the attention and MLP products need the whole sequence. An
// all-gather along T brings it in before the column-parallel product, a reduce-scatter
// along T sums the row-parallel partial results and keeps this rank's tokens.
#include "mgpu/ops.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::tp {

Tensor gather_sequence(const Tensor& x_r, dist::ProcessGroup& group) {
  MGPU_CHECK(x_r.ndim() == 3, "gather_sequence: expected [B, T/P, C], got ", x_r.str());
  // What you have: x_r [B, T/P, C] (this rank's tokens of every sequence, chapter §3's cut
  // along T); group: all_gather(output, input) (output = the ranks' inputs one after the
  // other, rank 0 first; wait() on the Work it returns), rank(), size(); permute(x, dims)
  // (a new contiguous tensor); t.clone(), t.reshape(shape), t.slice(begin, end) (rows
  // along dim 0, a view); Tensor::empty(shape, dtype, device).
  // TODO(task3) BEGIN: chapter §3: the whole [B, T, C] on every rank, tokens in sequence
  // order (token t of sequence b where it was before the cut); exactly one collective of
  // B·T·C values, complete when the function returns. Stuck: tools/hint 13 3
  // (about 6 lines).
  MGPU_FAIL("TODO(task3): gather_sequence is not written yet (lessons/13_tp_sp/sequence_parallel.cpp); ",
              x_r.str(), " over ", group.size(), " rank(s)");
  // TODO(task3) END
}

Tensor reduce_scatter_sequence(const Tensor& x, dist::ProcessGroup& group) {
  MGPU_CHECK(x.ndim() == 3 && x.size(1) % group.size() == 0, "reduce_scatter_sequence: ",
             x.str(), " is not [B, T, C] with T a multiple of the ", group.size(), " ranks");
  // What you have: x [B, T, C] (this rank's partial sum, every token); group: rank(),
  // reduce_scatter(output, input, dist::ReduceOp) (input cut into size() equal chunks,
  // output = chunk rank() of their sum over the ranks), size(); permute(x, dims);
  // t.reshape(shape); Tensor::empty(shape, dtype, device).
  // TODO(task3) BEGIN: chapter §3: this rank's tokens of the group's sum (§3's cut along
  // T, the one gather_sequence undoes), [B, T/P, C]; exactly one collective, complete when
  // the function returns. Stuck: tools/hint 13 3 (about 6 lines).
  MGPU_FAIL("TODO(task3): reduce_scatter_sequence is not written yet ",
              "(lessons/13_tp_sp/sequence_parallel.cpp); ", x.str(), " over ", group.size(), " rank(s)");
  // TODO(task3) END
}

}  // namespace mgpu::parallel::tp
