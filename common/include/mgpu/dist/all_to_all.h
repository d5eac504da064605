/// @file all_to_all.h
/// @brief The all-to-all by hand: lesson 04 defines pairwise_all_to_all from send and recv
/// alone (lessons/04_collectives/pairwise_all_to_all.cpp) and the library compiles its
/// reference (solutions/04_collectives/); all_to_all_pieces, the check and the cut that the
/// backends' ProcessGroup::all_to_all use too, is the library's (dist/checks.cpp).
///
///   task 5  pairwise_all_to_all  (pairwise_all_to_all.cpp)  own piece copied, then p-1 rounds:
///                                                           send to r+k, receive from r-k
///
/// Like the ring (ring.h), it uses only ProcessGroup::send and ProcessGroup::recv; the
/// library's own all_to_all is the backend's (MPI_Alltoallv, NCCL's grouped send/recv).
#pragma once

#include <cstdint>
#include <vector>

#include "mgpu/dist/process_group.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::dist {

/// An all_to_all's pieces, in elements of the (contiguous) tensors: input's piece for rank q
/// is send_counts[q] elements from send_offsets[q]; output's piece from rank q is
/// recv_counts[q] elements from recv_offsets[q]. Each list is size() long.
struct AllToAllPieces {
  std::vector<std::int64_t> send_counts;   ///< elements of input's piece for each rank
  std::vector<std::int64_t> send_offsets;  ///< where in input each rank's piece begins
  std::vector<std::int64_t> recv_counts;   ///< elements of output's piece from each rank
  std::vector<std::int64_t> recv_offsets;  ///< where in output each rank's piece begins
};

/// Checks an all_to_all's tensors and split sizes exactly as ProcessGroup::all_to_all does
/// (same mgpu::Error messages, c10d's wording for bad splits: rows of the same shape and
/// dtype, the same device, no overlap, a split list per tensor that is `size` long, not
/// negative and sums to dimension 0, or without one a dimension 0 that `size` divides) and
/// returns the pieces. Split sizes count rows of dimension 0, as in c10d.
AllToAllPieces all_to_all_pieces(const Tensor& output, const Tensor& input,
                                 const std::vector<std::int64_t>& output_split_sizes,
                                 const std::vector<std::int64_t>& input_split_sizes, int size);

/// Lesson 04, task 5. ProcessGroup::all_to_all (c10d's all_to_all_single), blocking: input is
/// cut along dimension 0 into pg.size() pieces (equal without split sizes, else
/// input_split_sizes[q] rows for rank q), and on return output's piece q (output_split_sizes[q]
/// rows) holds rank q's piece for this rank. Bad input throws the library's mgpu::Error
/// (all_to_all_pieces) before any message is sent. Rank r copies its own piece locally, then
/// in round k = 1 .. p-1 sends its piece for rank (r+k) mod p and receives the piece of rank
/// (r-k) mod p: p-1 sends and p-1 receives per rank, empty pieces included.
void pairwise_all_to_all(ProcessGroup& pg, const Tensor& output, const Tensor& input,
                         const std::vector<std::int64_t>& output_split_sizes = {},
                         const std::vector<std::int64_t>& input_split_sizes = {});

}  // namespace mgpu::dist
