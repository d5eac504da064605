/// @file sharded_checkpoint.h
/// @brief Sharded checkpoints that load on another layout: each rank writes only its own
/// slices, one index says where every slice of every tensor lies.
///
/// A parallel run holds each tensor cut into slices: tensor parallelism splits a weight
/// along one dimension, a pipeline stage holds only its layers, ZeRO splits the optimizer
/// state, data parallelism replicates the rest. A sharded checkpoint is a folder:
///
///     rank-00000.safetensors   the slices rank 0 wrote (lesson 07's writer, atomic save),
///     rank-00001.safetensors   each under the tensor's own name; a rank with nothing to
///     ...                      write writes no file
///     index.json               written last, atomically, by rank 0
///
/// The index names, for every tensor, its dtype, its global shape and its chunks: which
/// file holds which slice (offsets and lengths along every dimension). It is what PyTorch's
/// distributed checkpoint keeps in its `.metadata` file (torch/distributed/checkpoint/
/// metadata.py: TensorStorageMetadata's size and chunks, ChunkStorageMetadata's offsets and
/// sizes, and the storage data naming each chunk's file), written as JSON:
///
///     {"format": "mgpu-sharded-checkpoint", "format_version": 1, "world_size": 4,
///      "metadata": {"...": "..."},
///      "tensors": {"h.0.attn.c_attn.weight": {"dtype": "F32", "shape": [96, 32],
///         "chunks": [{"file": "rank-00000.safetensors", "offsets": [0, 0], "lengths": [48, 32]},
///                    {"file": "rank-00001.safetensors", "offsets": [48, 0], "lengths": [48, 32]}]}}}
///
/// The chunks of a tensor cover it exactly: every element is in one chunk and one only.
/// save_sharded checks it before anything is written (two ranks writing a replicated tensor
/// is an overlap; a slice no rank holds is a gap) and the loader checks it again, so a
/// checkpoint that silently lacks a shard cannot be written nor read. A folder without
/// index.json is no checkpoint: a save removes the old index before any rank writes, and
/// writes the new one after every rank's file is on disk.
///
/// Every shard file carries lesson 07's checksums (checksum.h: "checksum.<name>" in its
/// metadata) and the index repeats each chunk's checksum. A load reads every chunk it needs
/// whole once to verify it, and checks that the file's checksum is the index's: a flipped
/// byte, a shard copied over another, a shard from another save or a chunk naming the wrong
/// file are refused naming the file and the tensor. A save first removes the temporary
/// files of a save that was killed (".NAME.tmp.PID") and the shard files of ranks that do not
/// write this time.
///
/// A load on any layout asks for the slices the new layout holds; for each it intersects
/// the wanted slice with every stored chunk (intersect_slices, lesson 15's task 3) and reads
/// only those byte ranges of those files into its tensors (the header of each file, then runs
/// of contiguous elements); the chunks it touches are read whole once more, only to verify
/// their checksums (ShardedLoadStats::bytes_verified), never chunks it does not touch.
///
/// intersect_slices is lesson 15's (task 3, reshard_slice.cpp): declared here, defined in
/// the lesson's exercise file; the library is built with its reference
/// (solutions/15_3d_parallel/). The rest is the library's own.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/io/safetensors.h"

namespace mgpu::io {

/// The version of the index's layout; a reader refuses an index of another version.
constexpr int kShardedFormatVersion = 1;
/// The index's file name inside a checkpoint folder.
inline constexpr const char* kShardedIndexName = "index.json";

/// A box of a tensor: along each dimension d, the elements [offsets[d], offsets[d] +
/// lengths[d]). A 0-d tensor's slice has no dimension and holds its one element.
struct Slice {
  std::vector<std::int64_t> offsets;  ///< first element along each dimension
  std::vector<std::int64_t> lengths;  ///< elements along each dimension
  /// Elements in the box (1 for a 0-d slice; 0 when a length is 0).
  std::int64_t numel() const;
  /// "[0:48, 0:32]": begin and end along each dimension, for messages.
  std::string str() const;
  /// Same offsets and lengths.
  bool operator==(const Slice& other) const {
    return offsets == other.offsets && lengths == other.lengths;
  }
};

/// The whole tensor: offsets 0, lengths `shape`.
Slice whole_slice(const Shape& shape);
/// Part `part` of `parts` along dimension `dim`, the other dimensions whole. Uneven sizes
/// split as numpy's array_split does: the first (size % parts) parts have one element more
/// (10 over 4: 3, 3, 2, 2). Throws mgpu::Error when dim is not a dimension of `shape` or
/// part is not in [0, parts).
Slice split_slice(const Shape& shape, int dim, int parts, int part);
/// The row-major index of element `index` (global coordinates) inside `slice`.
std::int64_t linear_index_in(const Slice& slice, const std::vector<std::int64_t>& index);

/// Where a stored chunk and a wanted slice of one tensor overlap.
struct SliceOverlap {
  Slice global;                        ///< the overlap, in the tensor's coordinates
  std::vector<std::int64_t> in_stored; ///< its offsets inside the stored chunk
  std::vector<std::int64_t> in_wanted; ///< its offsets inside the wanted slice
};

/// Lesson 15's task 3 (reshard_slice.cpp): the elements `stored` and `wanted` (slices of
/// one tensor, same number of dimensions) have in common. Returns false when they share no
/// element (`out` is then left as it was); otherwise fills `out` with the overlap in global
/// coordinates and its offsets inside each of the two slices. Throws mgpu::Error when the
/// two slices differ in their number of dimensions.
bool intersect_slices(const Slice& stored, const Slice& wanted, SliceOverlap& out);

/// One tensor as this rank holds it: the tensor's global shape and this rank's slice.
struct ShardedTensor {
  Shape global_shape;  ///< the whole tensor's shape (equal on every rank)
  Slice slice;         ///< the part this rank holds
  Tensor local;        ///< its values, shape slice.lengths (contiguous, any device)
  /// Whether this rank writes its slice. A replicated tensor is held whole by many ranks
  /// and written by one (replicated(..., writes)): the others pass false. Slices a rank
  /// does not write still take part in a load (they are read into `local`).
  bool write = true;
};
/// Every tensor this rank holds, by name.
using ShardedDict = std::map<std::string, ShardedTensor>;

/// A tensor every rank holds whole; `writes` is true on exactly one rank, the one that
/// writes it (say rank 0, or the data-parallel rank 0 of the one group that holds it).
ShardedTensor replicated(const Tensor& local, bool writes);
/// A tensor split along `dim` into `parts` (split_slice), this rank holding part `part`:
/// `local` must have the part's shape. `writes` as in replicated (false on the replicas of
/// a data-parallel group but one).
ShardedTensor split_along(const Tensor& local, const Shape& global_shape, int dim, int parts,
                          int part, bool writes = true);

/// One stored chunk of a tensor: the file (in the checkpoint folder) and its slice.
struct ShardChunk {
  std::string file;  ///< e.g. "rank-00002.safetensors"
  Slice slice;       ///< the slice of the tensor that file holds (under the tensor's name)
  /// FNV-1a 64 of the chunk's bytes (checksum.h), as the file's own "checksum.<name>" holds
  /// it; "" in an index written before checksums (its chunks load unverified).
  std::string checksum;
};
/// One tensor of the index.
struct ShardedTensorInfo {
  DType dtype = DType::f32;        ///< element type
  Shape shape;                     ///< global shape
  std::vector<ShardChunk> chunks;  ///< chunks covering the tensor exactly, in file order
};
/// The whole index.json.
struct ShardedIndex {
  int world_size = 0;                               ///< ranks of the run that saved
  std::map<std::string, ShardedTensorInfo> tensors; ///< every tensor, by name
  Metadata metadata;                                ///< free text (never needed to load)
};

/// The file name rank `rank` writes: "rank-00002.safetensors".
std::string shard_file_name(int rank);

/// Checks that the chunks of every tensor in `index` lie inside its shape and cover it
/// exactly. Throws mgpu::Error naming `source`, the tensor and the chunk: "a gap" (elements
/// no chunk holds, their count and the first one), "an overlap" (the two chunks and their
/// common slice), a chunk outside the shape, or a chunk whose number of dimensions differs.
void check_exact_cover(const ShardedIndex& index, const std::string& source);

/// Collective over `group` (every rank calls it with its own `shards`): writes the sharded
/// checkpoint folder `dir` (created when missing). First every rank learns every rank's
/// slices (names, dtypes, global shapes, slices) and checks them: the same dtype and global
/// shape everywhere, each local tensor of its slice's shape, the written slices covering
/// each tensor exactly (check_exact_cover); a problem throws on every rank before anything
/// is written. Then rank 0 removes the old index, each rank with something to write writes
/// its file atomically (shard_file_name), and once every rank's file is on disk rank 0
/// writes index.json atomically. A failure on any rank throws on every rank, and leaves no
/// index. Returns the index's path.
std::string save_sharded(dist::ProcessGroup& group, const std::string& dir,
                         const ShardedDict& shards, const Metadata& metadata = {});

/// Reads and checks `dir`/index.json: its format and version, every entry, and the exact
/// cover of every tensor (check_exact_cover). Throws mgpu::Error naming the index; a
/// folder without index.json is "not a complete sharded checkpoint".
ShardedIndex read_sharded_index(const std::string& dir);

/// Statistics of a load: what it read from disk.
struct ShardedLoadStats {
  std::int64_t files_opened = 0;   ///< shard files whose header was read
  std::int64_t bytes_read = 0;     ///< tensor bytes read from them (headers not counted)
  std::int64_t read_calls = 0;     ///< contiguous runs read
  std::int64_t bytes_verified = 0; ///< chunk bytes read to verify their checksums
  /// Chunks without a checksum in the index (an index written before checksums).
  std::int64_t unverified_chunks = 0;
};

/// Fills every entry of `shards` (this rank's layout: names, global shapes, slices) from the
/// checkpoint in `dir`, on any layout: for each tensor, intersect the wanted slice with each
/// stored chunk and read only those bytes. `local` is allocated (on the CPU) when it is not
/// defined, otherwise written in place (its shape and dtype must match; any device). Not a
/// collective: each rank reads what it needs. Throws mgpu::Error naming the checkpoint and
/// the tensor for a name the index lacks, a global shape or dtype that differs, a slice
/// outside the tensor, a missing or damaged shard file (its header must list the tensor
/// with the chunk's dtype and shape). Returns what was read.
ShardedLoadStats load_sharded(const std::string& dir, ShardedDict& shards);
/// As load_sharded, with an index already read (read_sharded_index).
ShardedLoadStats load_sharded(const std::string& dir, const ShardedIndex& index,
                              ShardedDict& shards);

}  // namespace mgpu::io
