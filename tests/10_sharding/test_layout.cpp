// Lesson 10, task 1 in one process: the padded flat layout, the parameters' views into a
// flat buffer, and the pieces of each rank's shard, for world sizes 1 to 5 (the layout is
// arithmetic: no collective is needed to check it).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mgpu/ops.h"
#include "mgpu/parallel/sharding/flat_param.h"
#include "mgpu/tensor.h"

using mgpu::Shape;
using mgpu::Tensor;
namespace par = mgpu::parallel;

namespace {

using Specs = std::vector<std::pair<std::string, Shape>>;

// a (5), b (3), c (2): the file comment's example.
Specs abc() { return {{"a", {5}}, {"b", {3}}, {"c", {2}}}; }
// A Linear 7->5 and 5->4 with biases: 35 + 5 + 20 + 4 = 64 elements.
Specs two_linears() { return {{"0.weight", {5, 7}}, {"0.bias", {5}}, {"1.weight", {4, 5}}, {"1.bias", {4}}}; }

}  // namespace

TEST_CASE("the flat layout lays parameters back to back and pads to the world size",
          "[10_sharding][task1][points:2]") {
  const par::FlatLayout l = par::make_flat_layout(abc(), 3);
  CHECK(l.world_size == 3);
  REQUIRE(l.slots.size() == 3);
  CHECK(l.slots[0].name == "a");
  CHECK(l.slots[1].shape == Shape{3});
  CHECK(l.slots[0].offset == 0);
  CHECK(l.slots[1].offset == 5);
  CHECK(l.slots[2].offset == 8);
  CHECK(l.slots[2].numel == 2);
  CHECK(l.numel == 10);
  CHECK(l.padded_numel == 12);
  CHECK(l.shard_numel == 4);
  CHECK(l.shard_begin(2) == 8);

  // No padding when the world size divides the count; at most world_size - 1 otherwise.
  for (int world = 1; world <= 5; ++world) {
    const par::FlatLayout m = par::make_flat_layout(two_linears(), world);
    INFO(world << " ranks");
    CHECK(m.numel == 64);
    CHECK(m.padded_numel % world == 0);
    CHECK(m.padded_numel >= 64);
    CHECK(m.padded_numel - 64 < world);
    CHECK(m.shard_numel * world == m.padded_numel);
    CHECK(m.slots[3].offset == 60);
  }
  // One element on 4 ranks: three shards of padding only.
  const par::FlatLayout one = par::make_flat_layout({{"w", {1}}}, 4);
  CHECK(one.padded_numel == 4);
  CHECK(one.shard_numel == 1);
}

TEST_CASE("the flat layout refuses what it cannot shard", "[10_sharding][task1][points:1]") {
  CHECK_THROWS_WITH(par::make_flat_layout(abc(), 0), Catch::Contains("world size"));
  CHECK_THROWS_WITH(par::make_flat_layout({{"empty", {0}}}, 2), Catch::Contains("no element"));
  CHECK_THROWS_WITH(par::make_flat_layout({}, 2), Catch::Contains("no element"));
}

TEST_CASE("param_views are shaped like the parameters and write the flat buffer",
          "[10_sharding][task1][points:2]") {
  const par::FlatLayout l = par::make_flat_layout(two_linears(), 3);  // 64 -> 66
  Tensor flat = Tensor::zeros({l.padded_numel});
  std::vector<Tensor> views = par::param_views(l, flat);
  REQUIRE(views.size() == 4);
  CHECK(views[0].shape() == Shape{5, 7});
  CHECK(views[3].shape() == Shape{4});
  for (std::size_t i = 0; i < views.size(); ++i) {
    CHECK(views[i].shares_storage(flat));
    mgpu::fill_(views[i], static_cast<double>(i + 1));
  }
  const std::vector<float> v = flat.to_vector<float>();
  CHECK(v[0] == 1);
  CHECK(v[34] == 1);
  CHECK(v[35] == 2);   // 0.bias starts after the 35 weights
  CHECK(v[39] == 2);
  CHECK(v[40] == 3);
  CHECK(v[60] == 4);
  CHECK(v[63] == 4);
  CHECK(v[64] == 0);   // padding untouched
  CHECK(v[65] == 0);
  Tensor wrong = Tensor::zeros({64});
  CHECK_THROWS_WITH(par::param_views(l, wrong), Catch::Contains("66"));
}

TEST_CASE("shard_pieces cut parameters at shard boundaries", "[10_sharding][task1][points:2]") {
  // | a a a a | a b b b | c c . . |
  const par::FlatLayout l = par::make_flat_layout(abc(), 3);
  const auto r0 = par::shard_pieces(l, 0);
  REQUIRE(r0.size() == 1);
  CHECK(r0[0].slot == 0);
  CHECK(r0[0].param_offset == 0);
  CHECK(r0[0].shard_offset == 0);
  CHECK(r0[0].numel == 4);
  const auto r1 = par::shard_pieces(l, 1);
  REQUIRE(r1.size() == 2);
  CHECK(r1[0].slot == 0);
  CHECK(r1[0].param_offset == 4);  // the last element of a
  CHECK(r1[0].shard_offset == 0);
  CHECK(r1[0].numel == 1);
  CHECK(r1[1].slot == 1);
  CHECK(r1[1].param_offset == 0);
  CHECK(r1[1].shard_offset == 1);
  CHECK(r1[1].numel == 3);
  const auto r2 = par::shard_pieces(l, 2);
  REQUIRE(r2.size() == 1);  // c, then padding (no piece)
  CHECK(r2[0].slot == 2);
  CHECK(r2[0].shard_offset == 0);
  CHECK(r2[0].numel == 2);
  // Padding only: no piece at all.
  const par::FlatLayout one = par::make_flat_layout({{"w", {1}}}, 4);
  CHECK(par::shard_pieces(one, 3).empty());
  CHECK_THROWS_WITH(par::shard_pieces(l, 3), Catch::Contains("rank 3"));
}

TEST_CASE("every parameter element is in exactly one shard, where the layout says",
          "[10_sharding][task1][points:2]") {
  // Parameters of odd sizes, an empty one among them, on 1 to 5 ranks.
  const Specs specs = {{"w1", {3, 3}}, {"b1", {3}}, {"none", {0}}, {"w2", {2, 5}}, {"b2", {1}}};
  for (int world = 1; world <= 5; ++world) {
    const par::FlatLayout l = par::make_flat_layout(specs, world);
    // flat[i] = i + 1 (padding 0); each piece must read its parameter's elements back.
    std::vector<int> seen(static_cast<std::size_t>(l.numel), 0);
    for (int r = 0; r < world; ++r) {
      for (const par::ShardPiece& p : par::shard_pieces(l, r)) {
        REQUIRE(p.slot < l.slots.size());
        REQUIRE(p.numel > 0);
        const par::FlatSlot& s = l.slots[p.slot];
        CHECK(p.param_offset + p.numel <= s.numel);
        CHECK(p.shard_offset + p.numel <= l.shard_numel);
        for (std::int64_t e = 0; e < p.numel; ++e) {
          // the same element, addressed through the shard and through the parameter
          const std::int64_t via_shard = l.shard_begin(r) + p.shard_offset + e;
          const std::int64_t via_param = s.offset + p.param_offset + e;
          CHECK(via_shard == via_param);
          if (via_param >= 0 && via_param < l.numel) ++seen[static_cast<std::size_t>(via_param)];
        }
      }
    }
    INFO(world << " ranks");
    CHECK(std::count(seen.begin(), seen.end(), 1) == l.numel);
  }
}
