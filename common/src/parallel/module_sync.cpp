// Cross-rank parameter checks and broadcasts of module state.
#include "mgpu/parallel/module_sync.h"

#include <cstdint>
#include <string>
#include <vector>

#include "mgpu/dist/work.h"

namespace mgpu::parallel {

namespace {

// One parameter as fixed-width integers: requires_grad, dtype, ndim, up to kMaxDims sizes.
constexpr int kMaxDims = 8;
constexpr int kWidth = 3 + kMaxDims;

std::vector<std::int64_t> signature(nn::Module& module) {
  std::vector<std::int64_t> sig;
  for (nn::Parameter* p : module.parameters()) {
    const Shape& s = p->value.shape();
    MGPU_CHECK(s.size() <= kMaxDims, "verify_params_across_ranks: parameter '", p->name(),
               "' has ", s.size(), " dimensions; at most ", kMaxDims, " are supported");
    sig.push_back(p->requires_grad() ? 1 : 0);
    sig.push_back(static_cast<std::int64_t>(p->value.dtype()));
    sig.push_back(static_cast<std::int64_t>(s.size()));
    for (int d = 0; d < kMaxDims; ++d) sig.push_back(d < static_cast<int>(s.size()) ? s[d] : 0);
  }
  return sig;
}

// "f32[10, 64] (trainable)" from one signature row.
std::string describe_row(const std::int64_t* row) {
  Shape s(row + 3, row + 3 + row[2]);
  return std::string(dtype_name(static_cast<DType>(row[1]))) + shape_str(s) +
         (row[0] ? " (trainable)" : " (frozen)");
}

}  // namespace

void verify_params_across_ranks(nn::Module& module, dist::ProcessGroup& group) {
  const int world = group.size();
  const Device dev = group.device();
  // Step 1) the same number of parameters everywhere?
  const auto named = module.named_parameters();
  const std::int64_t count = static_cast<std::int64_t>(named.size());
  Tensor counts = Tensor::empty({world}, DType::i64, dev);
  Tensor mine = Tensor::from_vector(std::vector<std::int64_t>{count}, {1}, dev);
  group.all_gather(counts, mine).wait();
  const std::vector<std::int64_t> all_counts = counts.to_vector<std::int64_t>();
  for (int r = 1; r < world; ++r)
    MGPU_CHECK(all_counts[r] == all_counts[0], "DistributedDataParallel: rank ", r, " has ",
               all_counts[r], " parameters but rank 0 has ", all_counts[0],
               "; every rank must build the same model");
  if (count == 0) return;
  // Step 2) the same shape, dtype and requires_grad for each? Gather every rank's rows so
  // that all ranks can name the same first difference.
  const std::vector<std::int64_t> sig = signature(module);
  Tensor all = Tensor::empty({world * count * kWidth}, DType::i64, dev);
  group.all_gather(all, Tensor::from_vector(sig, {count * kWidth}, dev)).wait();
  const std::vector<std::int64_t> rows = all.to_vector<std::int64_t>();
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t* ref = rows.data() + i * kWidth;
    for (int r = 1; r < world; ++r) {
      const std::int64_t* other = rows.data() + (r * count + i) * kWidth;
      bool same = true;
      for (int k = 0; k < kWidth; ++k) same = same && ref[k] == other[k];
      MGPU_CHECK(same, "DistributedDataParallel: parameter ", i, " ('", named[i].first,
                 "') is ", describe_row(ref), " on rank 0 but ", describe_row(other),
                 " on rank ", r, "; every rank must build the same model");
    }
  }
}

void broadcast_module_state(nn::Module& module, dist::ProcessGroup& group, int root) {
  std::vector<dist::Work> works;
  for (nn::Parameter* p : module.parameters()) works.push_back(group.broadcast(p->value, root));
  dist::wait_all(works);
  broadcast_buffers(module, group, root);
}

void broadcast_buffers(nn::Module& module, dist::ProcessGroup& group, int root) {
  std::vector<dist::Work> works;
  for (auto& [name, b] : module.named_buffers()) works.push_back(group.broadcast(*b, root));
  dist::wait_all(works);
}

}  // namespace mgpu::parallel
