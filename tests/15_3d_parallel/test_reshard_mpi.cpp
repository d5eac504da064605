// Lesson 15, task 3 under mpirun (4 ranks; any world size runs): a checkpoint saved on one
// layout loads exactly on others. At 4 ranks the save is DP 2 x TP 2: the TP rank holds
// half of each split tensor, only the DP-rank-0 replicas write, the replicated tensors are
// written once. Every rank then loads it at 1 part (the whole model, as one process would),
// at 4 parts along the same dimension, and at 2 parts along the other: tensor by tensor,
// bit for bit, and reading only the bytes each keeps.
#include "reshard_test_util.h"

#include <map>
#include <set>
#include <string>

#include "groups.h"
#include "shared_temp_dir.h"

using namespace reshard_test;
using mgpu::testing::cpu_group;
using mgpu::testing::SharedTempDir;

namespace {

// A small model's state: split weights (rows, as column-parallel layers), a split bias, a
// replicated LayerNorm weight, an f64 optimizer moment, the step count.
std::map<std::string, Tensor> model() {
  return {{"c_fc.weight", pattern({12, 6}, DType::f32, 0)},
          {"c_fc.bias", pattern({12}, DType::f32, 100)},
          {"ln.weight", pattern({6}, DType::f32, 200)},
          {"c_fc.weight.exp_avg", pattern({12, 6}, DType::f64, 300)},
          {"step", pattern({}, DType::i64, 7)}};
}

const std::set<std::string> kReplicated = {"ln.weight", "step"};

// This rank's shards: the split tensors cut along `dim` (the last one where a tensor has
// fewer) into `parts`, this rank holding `part`, written when `writes`; the replicated ones
// whole, written when `writes_replicated`.
io::ShardedDict shards(int dim, int parts, int part, bool writes, bool writes_replicated) {
  io::ShardedDict d;
  for (const auto& [name, t] : model()) {
    if (kReplicated.count(name)) {
      d[name] = io::replicated(t, writes_replicated);
      continue;
    }
    const int along = std::min(dim, t.ndim() - 1);
    d[name] = io::split_along(cut(t, io::split_slice(t.shape(), along, parts, part)), t.shape(),
                              along, parts, part, writes);
  }
  return d;
}

}  // namespace

TEST_CASE("task3: saved at DP 2 x TP 2, loaded at 1 rank, at 4 and at 2 split the other way: "
          "exact, tensor by tensor", "[15_3d_parallel][task3][points:4]") {
  dist::ProcessGroup& g = cpu_group();
  const int tp = g.size() % 2 == 0 ? 2 : g.size();  // 2 x 2 at 4 ranks
  const int tp_rank = g.rank() % tp, dp_rank = g.rank() / tp;
  SharedTempDir tmp("mgpu-l15-reshard");
  io::save_sharded(g, tmp.path(), shards(0, tp, tp_rank, dp_rank == 0, g.rank() == 0));
  const io::ShardedIndex index = io::read_sharded_index(tmp.path());
  CHECK(index.tensors.at("c_fc.weight").chunks.size() == static_cast<std::size_t>(tp));
  CHECK(index.tensors.at("step").chunks.size() == 1);
  struct Layout {
    int dim, parts, part;
  };
  const std::vector<Layout> layouts = {{0, 1, 0}, {0, 4, g.rank() % 4}, {1, 2, g.rank() % 2}};
  for (const Layout& l : layouts) {
    io::ShardedDict want = shards(l.dim, l.parts, l.part, true, true);
    for (auto& [name, t] : want) t.local = Tensor();  // the load allocates them
    const io::ShardedLoadStats stats = io::load_sharded(tmp.path(), index, want);
    std::int64_t kept = 0;
    for (const auto& [name, t] : want) {
      INFO(name << ": part " << l.part << " of " << l.parts << " along dimension " << l.dim
                << ", slice " << t.slice.str());
      CHECK(same_bits(t.local, cut(model().at(name), t.slice)));
      kept += static_cast<std::int64_t>(t.local.nbytes());
    }
    CHECK(stats.bytes_read == kept);  // no byte read that this layout does not keep
  }
}
