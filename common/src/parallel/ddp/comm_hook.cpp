// The two built-in communication hooks. Both divide before they sum, as PyTorch's do.
#include "mgpu/parallel/ddp/comm_hook.h"

#include "mgpu/ops.h"

namespace mgpu::parallel {

CommFuture allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  scale_(bucket.buffer, 1.0 / group.size());
  return CommFuture{group.all_reduce(bucket.buffer, dist::ReduceOp::sum), nullptr};
}

CommFuture fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  Tensor compressed = cast(bucket.buffer, DType::f16);
  scale_(compressed, 1.0 / group.size());
  Tensor buffer = bucket.buffer;
  dist::Work work = group.all_reduce(compressed, dist::ReduceOp::sum);
  // Decompress once the sum has arrived: the f16 average becomes the bucket's value again.
  return CommFuture{work, [compressed, buffer]() mutable { cast_(buffer, compressed); }};
}

}  // namespace mgpu::parallel
