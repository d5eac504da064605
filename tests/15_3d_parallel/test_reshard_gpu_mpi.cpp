// Lesson 15, task 3 on a GPU under mpirun: the GPU twin of the layout-changing load. Each
// rank's shards live on its GPU; the save copies them to the host, the load reads the
// overlaps on the host and copies them into the GPU tensors in place. Skipped where no GPU
// is visible.
#include "reshard_test_util.h"

#include "groups.h"
#include "mgpu/dist/dist.h"
#include "shared_temp_dir.h"

using namespace reshard_test;
using mgpu::testing::cpu_group;
using mgpu::testing::SharedTempDir;

TEST_CASE("gpu: task3: saved from CUDA tensors in P parts, loaded into CUDA tensors at 1 and "
          "at 3 parts along the other dimension: exact", "[15_3d_parallel][task3][points:1][gpu]") {
  dist::ProcessGroup& g = cpu_group();
  const Device gpu = dist::rank_device(Device::Kind::cuda);
  const Tensor w = pattern({12, 6}, DType::f32, 0), m = pattern({12, 6}, DType::f64, 500);
  SharedTempDir tmp("mgpu-l15-reshard-gpu");
  io::ShardedDict mine;
  for (const auto& [name, t] : std::map<std::string, Tensor>{{"w", w}, {"m", m}}) {
    const io::Slice s = io::split_slice(t.shape(), 0, g.size(), g.rank());
    mine[name] = io::split_along(cut(t, s).to(gpu), t.shape(), 0, g.size(), g.rank());
  }
  io::save_sharded(g, tmp.path(), mine);
  for (const auto& [parts, dim] : std::vector<std::pair<int, int>>{{1, 0}, {3, 1}}) {
    io::ShardedDict want;
    for (const auto& [name, t] : std::map<std::string, Tensor>{{"w", w}, {"m", m}}) {
      const int part = g.rank() % parts;
      const io::Slice s = io::split_slice(t.shape(), dim, parts, part);
      want[name] = io::split_along(Tensor::zeros(s.lengths, t.dtype(), gpu), t.shape(), dim, parts, part);
    }
    io::load_sharded(tmp.path(), want);
    for (const auto& [name, t] : want) {
      INFO(name << ": part " << g.rank() % parts << " of " << parts << " along " << dim);
      CHECK(t.local.device().is_cuda());
      CHECK(same_bits(t.local.to(Device::cpu()), cut(name == "w" ? w : m, t.slice)));
    }
  }
}
