// Task 1: attention split by heads. Each rank owns n_head / P whole heads; the fused c_attn
// holds q, k and v one after another, so a rank's rows are three separate runs of rows,
// one in each part, never one contiguous slice.
#include "mgpu/copy.h"
#include "mgpu/parallel/tp/parallel_block.h"

namespace mgpu::parallel::tp {

ShardRange head_shard(std::int64_t n_head, int tp, int rank) {
  // What you have: n_head, tp (the group's size), rank (0 <= rank < tp); ShardRange{begin,
  // end}; shard_range(total, parts, index) (lesson 11's split of total features over
  // parts, torch.tensor_split's rule); MGPU_CHECK(condition, message parts...) and
  // MGPU_FAIL(message parts...) (throw mgpu::Error).
  // TODO(task1) BEGIN: chapter §1's cut by heads: the heads [begin, end) this rank owns,
  // n_head / tp whole heads; the ranks' ranges, in rank order, cover 0..n_head-1 once. A
  // head count tp does not divide is refused, never split unevenly: an mgpu::Error whose
  // message names both numbers and contains "heads do not split". Stuck: tools/hint 13 1
  // (about 4 lines).
  MGPU_CHECK(tp >= 1 && n_head % tp == 0, "head_shard: ", n_head, " heads do not split over ",
             tp, " ranks (tensor parallelism gives every rank n_head / tp whole heads)");
  return shard_range(n_head, tp, rank);
  // TODO(task1) END
}

Tensor qkv_head_rows(const Tensor& full, ShardRange heads, std::int64_t head_dim) {
  MGPU_CHECK(full.ndim() >= 1 && full.size(0) % 3 == 0, "qkv_head_rows: ", full.str(),
             " is not c_attn's [3C, ...]");
  const std::int64_t C = full.size(0) / 3, width = heads.size() * head_dim;
  MGPU_CHECK(heads.begin >= 0 && heads.end * head_dim <= C && heads.begin <= heads.end,
             "qkv_head_rows: heads [", heads.begin, ", ", heads.end, ") of ", head_dim,
             " values do not fit C = ", C);
  Shape shape = full.shape();
  shape[0] = 3 * width;
  Tensor out = Tensor::empty(shape, full.dtype(), full.device());
  // What you have: full ([3C] or [3C, in]: chapter §1's fused layout, q's C rows, then k's,
  // then v's, each part its heads one after another, D rows a head); heads, head_dim = D;
  // C, width (= its heads' rows per part); out [3·width, ...]; copy_(dst, src)
  // (mgpu/copy.h); t.reshape(shape), t.slice(begin, end) (rows along dim 0) and
  // t.view(offset, shape) (views of the same values).
  // TODO(task1) BEGIN: chapter §1's head cut: out holds this rank's q rows, then its k
  // rows, then its v rows (the layout ParallelSelfAttention reads as [3, H/P, D]), the
  // full layer's values for heads [heads.begin, heads.end). Stuck: tools/hint 13 1
  // (about 5 lines).
  for (std::int64_t part = 0; part < 3; ++part) {
    Tensor dst = out.slice(part * width, (part + 1) * width);
    copy_(dst, full.slice(part * C + heads.begin * head_dim, part * C + heads.end * head_dim));
  }
  // TODO(task1) END
  return out;
}

}  // namespace mgpu::parallel::tp
