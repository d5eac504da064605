// Private: launch shapes of the nn kernels, worked out on the host in 64 bits and checked
// before anything is narrowed to CUDA's unsigned grid sizes. Plain C++, so the CPU tests
// check the arithmetic where no GPU is present.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "mgpu/error.h"

namespace mgpu::nn::detail {

/// How a per-channel sum over `count` values is cut among blocks: `splits` blocks per
/// channel, each taking `chunk` consecutive values (the last one the rest, never none).
struct ChannelSplit {
  std::int64_t chunk = 0;
  std::int64_t splits = 1;
};

/// Enough blocks in all to fill a large GPU (about 1024: several per SM of an H100), but at
/// least 4096 values per block, so that combining the blocks' partial results stays cheap.
inline ChannelSplit split_channels(std::int64_t channels, std::int64_t count) {
  constexpr std::int64_t kBlocksWanted = 1024, kMinPerBlock = 4096;
  ChannelSplit s;
  if (channels <= 0 || count <= 0) return s;
  const std::int64_t by_gpu = (kBlocksWanted + channels - 1) / channels;
  const std::int64_t by_size = (count + kMinPerBlock - 1) / kMinPerBlock;
  const std::int64_t splits = std::max<std::int64_t>(1, std::min(by_gpu, by_size));
  s.chunk = (count + splits - 1) / splits;
  s.splits = (count + s.chunk - 1) / s.chunk;  // rounding the chunk up may leave a block idle
  return s;
}

/// The grid of transpose_inner's 32x32 tiles for x [batch, m, k]: x tiles cover k (the last
/// dimension), y tiles cover m (the middle one), z steps through the batch (the kernel loops
/// over the rest). CUDA allows 2^31 - 1 blocks in x but only 65535 in y and z, so a middle
/// dimension over 65535 * 32 cannot be launched; the check names it, with the tensor `what`.
struct TransposeGrid {
  unsigned x = 1, y = 1, z = 1;
};

inline TransposeGrid transpose_grid(std::int64_t batch, std::int64_t m, std::int64_t k,
                                    const std::string& what) {
  constexpr std::int64_t kTile = 32, kMaxX = 2147483647, kMaxYZ = 65535;
  const std::int64_t tiles_k = (k + kTile - 1) / kTile, tiles_m = (m + kTile - 1) / kTile;
  MGPU_CHECK(tiles_k <= kMaxX, "transpose_inner: ", what, " is too large for one launch: its last ",
             "dimension (", k, ") is over ", kMaxX * kTile);
  MGPU_CHECK(tiles_m <= kMaxYZ, "transpose_inner: ", what, " is too large for one launch: its ",
             "middle dimension (", m, ") is over ", kMaxYZ * kTile);
  TransposeGrid g;
  g.x = static_cast<unsigned>(tiles_k);
  g.y = static_cast<unsigned>(tiles_m);
  g.z = static_cast<unsigned>(std::max<std::int64_t>(1, std::min(batch, kMaxYZ)));
  return g;
}

}  // namespace mgpu::nn::detail
