// A group of one rank: what every rank sends it sends itself, so each collective is a copy
// (or nothing), and a one-process MoE runs the expert-parallel code path unchanged.
#include "mgpu/parallel/moe/local_group.h"

#include "mgpu/copy.h"
#include "mgpu/error.h"

namespace mgpu::parallel::moe {

LocalGroup::LocalGroup(const Device& device) : dist::ProcessGroup(0, 1), device_(device) {}

dist::Work LocalGroup::copy(const char* op, const Tensor& output, const Tensor& input) {
  MGPU_CHECK(output.numel() == input.numel() && output.dtype() == input.dtype(), "LocalGroup::",
             op, ": output ", output.str(), " and input ", input.str(),
             " must hold as many values of one dtype");
  if (input.numel() == 0) return {};
  Tensor dst = output;
  copy_(dst, input.reshape(output.shape()));
  return {};
}

dist::Work LocalGroup::all_reduce(const Tensor&, dist::ReduceOp) { return {}; }
dist::Work LocalGroup::broadcast(const Tensor&, int root) {
  MGPU_CHECK(root == 0, "LocalGroup::broadcast: root ", root, " in a group of one rank");
  return {};
}
dist::Work LocalGroup::reduce(const Tensor&, int root, dist::ReduceOp) {
  MGPU_CHECK(root == 0, "LocalGroup::reduce: root ", root, " in a group of one rank");
  return {};
}
dist::Work LocalGroup::all_gather(const Tensor& output, const Tensor& input) {
  if (output.shares_storage(input) && output.offset() == input.offset()) return {};
  return copy("all_gather", output, input);
}
dist::Work LocalGroup::reduce_scatter(const Tensor& output, const Tensor& input, dist::ReduceOp) {
  if (output.shares_storage(input) && output.offset() == input.offset()) return {};
  return copy("reduce_scatter", output, input);
}
dist::Work LocalGroup::all_to_all(const Tensor& output, const Tensor& input,
                                  const std::vector<std::int64_t>& output_split_sizes,
                                  const std::vector<std::int64_t>& input_split_sizes) {
  MGPU_CHECK(output_split_sizes.size() <= 1 && input_split_sizes.size() <= 1,
             "LocalGroup::all_to_all: split sizes for more than one rank");
  return copy("all_to_all", output, input);
}
dist::Work LocalGroup::barrier() { return {}; }
dist::Work LocalGroup::send(const Tensor&, int dst, int) {
  MGPU_FAIL("LocalGroup::send: no rank ", dst, " in a group of one rank");
}
dist::Work LocalGroup::recv(const Tensor&, int src, int) {
  MGPU_FAIL("LocalGroup::recv: no rank ", src, " in a group of one rank");
}
dist::Work LocalGroup::batch_isend_irecv(const std::vector<dist::P2POp>& ops) {
  MGPU_CHECK(ops.empty(), "LocalGroup::batch_isend_irecv: no peers in a group of one rank");
  return {};
}

}  // namespace mgpu::parallel::moe
