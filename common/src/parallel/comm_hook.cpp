// The two built-in communication hooks.
#include "mgpu/parallel/comm_hook.h"

#include "mgpu/ops.h"

namespace mgpu::parallel {

CommFuture allreduce_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  return CommFuture{group.all_reduce(bucket.buffer, dist::ReduceOp::sum), nullptr};
}

CommFuture fp16_compress_hook(dist::ProcessGroup& group, GradBucket& bucket) {
  if (bucket.buffer.dtype() == DType::f16) return allreduce_hook(group, bucket);
  Tensor compressed = cast(bucket.buffer, DType::f16);
  Tensor buffer = bucket.buffer;
  dist::Work work = group.all_reduce(compressed, dist::ReduceOp::sum);
  // Decompress once the sum has arrived: the f16 sum becomes the bucket's value again.
  return CommFuture{work, [compressed, buffer]() mutable { cast_(buffer, compressed); }};
}

}  // namespace mgpu::parallel
