/// @file traffic.h
/// @brief Traffic: the ops one rank issued on a process group and the bytes they carried
/// away from it, by kind, counted by the group as each op is issued (ProcessGroup::traffic).
///
/// What counts as a rank's bytes:
///  - send: the tensor; recv: the tensor received (counted apart: it is not sent);
///  - all_to_all: its pieces for the other ranks, exactly (the piece for itself stays);
///  - the reductions and gathers, whose algorithm the backend picks: what lesson 04's ring
///    sends from each rank for the tensors the op was handed (the bus bytes of nccl-tests):
///    all_gather (P−1)·input, reduce_scatter (P−1)/P·input, all_reduce 2(P−1)/P·tensor,
///    broadcast and reduce the tensor; all of them 0 in a group of one; barrier 0.
///
///     const dist::Traffic before = group.traffic();
///     ... a step ...
///     std::printf("%s\n", (group.traffic() - before).str().c_str());
#pragma once

#include <cstdint>
#include <string>

namespace mgpu::dist {

/// Ops of one kind and their bytes.
struct OpTraffic {
  std::int64_t ops = 0;    ///< ops issued
  std::int64_t bytes = 0;  ///< their bytes (see the file comment for each kind)
};

/// One rank's ops on a group (or several groups summed), by kind.
struct Traffic {
  OpTraffic all_reduce;      ///< all_reduce: the ring's 2(P−1)/P of the tensor
  OpTraffic broadcast;       ///< broadcast: the tensor (0 in a group of one)
  OpTraffic reduce;          ///< reduce: the tensor (0 in a group of one)
  OpTraffic all_gather;      ///< all_gather: the ring's (P−1)·input
  OpTraffic reduce_scatter;  ///< reduce_scatter: the ring's (P−1)/P of the input
  OpTraffic all_to_all;      ///< all_to_all: the pieces for the other ranks
  OpTraffic barrier;         ///< barrier: no bytes
  OpTraffic send;            ///< send, and the sends of batch_isend_irecv: the tensors
  OpTraffic recv;            ///< recv, and the receives of batch_isend_irecv: not sent

  /// Bytes sent: every kind but recv.
  std::int64_t sent_bytes() const;
  /// Each kind's ops and bytes added.
  Traffic& operator+=(const Traffic& other);
  /// Each kind's ops and bytes of `before` taken away (the traffic since `before`).
  Traffic operator-(const Traffic& before) const;
  /// "all-to-all 32: 6144.0 KiB, send 24: 3072.0 KiB (sent 9216.0 KiB; recv 24: 3072.0 KiB)"
  /// (each kind: its ops, then their bytes together):
  /// the kinds with ops, "none" where there are none.
  std::string str() const;
};

}  // namespace mgpu::dist
