// The all-to-all's time in a group of ranks inside a node or across nodes
// (mgpu/perf/moe_model.h): lesson 04's pairwise exchange in alpha-beta terms, the network
// shared by every GPU of a node.
#include <algorithm>

#include "mgpu/error.h"
#include "mgpu/perf/moe_model.h"

namespace mgpu::perf {

double group_alltoall_seconds(const Hardware& hw, double bytes, int size, int stride) {
  MGPU_CHECK(size >= 1 && stride >= 1, "all-to-all of ", size, " ranks ", stride, " apart");
  if (size == 1) return 0;
  const int G = std::max(1, hw.gpus_per_node);
  const double p = size, block = bytes / p;  // each message: a 1/p block of the buffer
  const double beta_intra = hw.intra_busbw > 0 ? 1.0 / hw.intra_busbw : 0;
  if (static_cast<long long>(size) * stride <= G)  // the whole group inside one node
    return (p - 1) * hw.intra_latency_s + (p - 1) * block * beta_intra;
  const double on_a_node = std::max(1, std::min(size, G / stride));  // q
  const double beta_network = hw.inter_bw > 0 ? G / hw.inter_bw : 0;  // one GPU's share
  const double alpha = std::max(hw.intra_latency_s, hw.inter_latency_s);
  return (p - 1) * alpha + block * ((on_a_node - 1) * beta_intra + (p - on_a_node) * beta_network);
}

}  // namespace mgpu::perf
