/// @file process_group.h
/// @brief ProcessGroup: collectives and point-to-point messages between ranks (c10d vocabulary).
///
/// A ProcessGroup connects every rank of the world. Its ops take tensors (handles, as in
/// PyTorch: a `const Tensor&` argument may still be written — the op's doc says which) and
/// return a Work at once. Ops run in the order they were issued, one after another, on the
/// group's communication thread, so the caller can keep computing (DDP overlaps its
/// gradient all-reduce with backward this way). Every rank must issue the same collectives
/// in the same order with the same shapes and dtypes; send/recv pair up by peer and tag.
///
/// Backends:
///  - "mpi":  CPU tensors go to MPI directly; CUDA tensors are staged through page-locked
///            host buffers on the device's comm stream. Works with any number of ranks per GPU.
///  - "nccl": CUDA tensors on this rank's own GPU, on a stream of the group's own (two
///            groups on one stream could deadlock). One GPU per rank.
///  - "auto": nccl where the tensors are on CUDA, the build has NCCL and every rank on every
///            node has a GPU of its own; mpi otherwise. The choice and the reason are printed.
///
/// No hangs: an op that does not finish within the group's timeout (MGPU_DIST_TIMEOUT_S,
/// default 300 s) ends the whole job with one line naming the rank, the op, its sequence
/// number, shape and group, and the ranks of this machine that have not reached it, each
/// with the last collective it issued there (the ranks publish their progress in shared
/// memory), and a rank of this machine that is stopped (SIGSTOP, a debugger) or gone.
/// Always on: each rank compares every collective's op, dtype, reduce op, root and element
/// count with what the other ranks of its machine issued as the same number (a few loads
/// from that shared memory, no message), and a difference fails the op on the ranks that
/// see it with PyTorch's "Detected mismatch between collectives on ranks" (a rank already
/// inside the op ends the job within a second). With MGPU_DIST_DEBUG=1 the ranks compare
/// each collective (sequence number, op, dtype, shape) before running it, across machines
/// too, and report the first divergence, also one across groups: every rank must issue its
/// collectives, over all groups, in one order, as NCCL requires. Messages number groups in
/// the order the program created them: group 0 first.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "mgpu/device.h"
#include "mgpu/dist/traffic.h"
#include "mgpu/dist/work.h"
#include "mgpu/tensor.h"

namespace mgpu::dist {

/// How a reduction combines the ranks' values. avg is sum / world size (floating dtypes only).
enum class ReduceOp { sum, avg, max, min };
/// "sum", "avg", "max", "min" (for messages).
const char* reduce_op_name(ReduceOp op);

/// One message of a batch_isend_irecv call.
struct P2POp {
  /// Direction of the message.
  enum class Kind { send, recv };
  Kind kind = Kind::send;  ///< send or receive
  Tensor tensor;           ///< data to send, or buffer to receive into
  int peer = 0;            ///< destination rank (send) or source rank (recv)
  int tag = 0;             ///< matches a send with its recv between the same two ranks
  /// A send of `t` to rank `dst`.
  static P2POp isend(const Tensor& t, int dst, int tag = 0) { return {Kind::send, t, dst, tag}; }
  /// A receive into `t` from rank `src`.
  static P2POp irecv(const Tensor& t, int src, int tag = 0) { return {Kind::recv, t, src, tag}; }
};

/// A communicator over ranks; the "mpi" and "nccl" backends implement it (see the file
/// comment). Created by new_group() or init_process_group().
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  /// This process's rank in the group: 0..size()-1.
  int rank() const { return rank_; }
  /// Number of ranks in the group.
  int size() const { return size_; }
  /// "mpi" or "nccl".
  virtual std::string backend_name() const = 0;
  /// The device whose tensors this group is meant for (NCCL accepts only this one).
  virtual Device device() const = 0;
  /// Collectives this rank has issued on this group so far (barriers included; send and
  /// recv not): the sequence number of the latest one, as the timeout and debug messages
  /// name it. Lets a program or test check how many collectives a step costs. -1 for a
  /// group that does not count (a wrapper around another group).
  virtual std::int64_t collectives_issued() const { return -1; }
  /// What this rank has issued on this group so far and the bytes it carried, by kind
  /// (traffic.h: exact for all_to_all and send/recv, the ring's bytes for the reductions
  /// and gathers). All zero for a group that does not count (a wrapper around another).
  virtual Traffic traffic() const { return {}; }

  // ---- collectives: every rank calls them, in the same order ---------------------------
  /// In place: every rank's `tensor` becomes op(all ranks' tensors), elementwise.
  virtual Work all_reduce(const Tensor& tensor, ReduceOp op = ReduceOp::sum) = 0;
  /// In place: every rank's `tensor` becomes root's.
  virtual Work broadcast(const Tensor& tensor, int root = 0) = 0;
  /// In place on root: root's `tensor` becomes op(all ranks' tensors); the others' tensors
  /// are left unchanged.
  virtual Work reduce(const Tensor& tensor, int root = 0, ReduceOp op = ReduceOp::sum) = 0;
  /// output (numel = size() * input.numel()) <- the ranks' inputs one after another, rank 0
  /// first (c10d's all_gather_into_tensor). input may be output's own chunk rank().
  virtual Work all_gather(const Tensor& output, const Tensor& input) = 0;
  /// output <- chunk rank() of op(all ranks' inputs), where input (numel = size() *
  /// output.numel()) is cut into size() equal chunks (c10d's reduce_scatter_tensor).
  virtual Work reduce_scatter(const Tensor& output, const Tensor& input,
                              ReduceOp op = ReduceOp::sum) = 0;
  /// output <- the ranks' pieces for this rank, rank 0's first (c10d's all_to_all_single):
  /// input is cut along dimension 0 into size() pieces, piece r going to rank r, and output
  /// receives rank r's piece for this rank at place r. Without split sizes the pieces are
  /// equal (dimension 0 of input and output a multiple of size()); with them,
  /// input_split_sizes[r] rows of input go to rank r and output_split_sizes[r] rows come
  /// from it (each list size() long, summing to its tensor's dimension 0; rank r's
  /// input_split_sizes[q] must equal rank q's output_split_sizes[r]). The rows of input and
  /// output have the same shape and dtype on every rank; input and output must not overlap.
  virtual Work all_to_all(const Tensor& output, const Tensor& input,
                          const std::vector<std::int64_t>& output_split_sizes = {},
                          const std::vector<std::int64_t>& input_split_sizes = {}) = 0;
  /// Completes on a rank once every rank has called it.
  virtual Work barrier() = 0;

  // ---- point to point ---------------------------------------------------------------------
  /// Sends `tensor` to rank `dst`; do not change it before the Work completes.
  virtual Work send(const Tensor& tensor, int dst, int tag = 0) = 0;
  /// Receives into `tensor` (same dtype and numel as the matching send) from rank `src`.
  virtual Work recv(const Tensor& tensor, int src, int tag = 0) = 0;
  /// Starts all sends and receives together; one Work for the whole batch. With the mpi
  /// backend, separate send()/recv() calls are just as good (both are non-blocking); NCCL
  /// needs a batch when a rank sends and receives at once (e.g. in a ring), otherwise the
  /// two wait for each other on the comm stream.
  virtual Work batch_isend_irecv(const std::vector<P2POp>& ops) = 0;

 protected:
  /// For backends: this process's `rank` in a group of `size` ranks.
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}

 private:
  int rank_ = 0;
  int size_ = 1;
};

/// Which backend a group uses, and why (printed by new_group on rank 0).
struct BackendChoice {
  std::string backend;  ///< "mpi" or "nccl"
  std::string reason;   ///< why, in words: e.g. "this build has no NCCL"
};
/// Resolves "auto", "mpi" or "nccl" for tensors on `device`. Collective: every rank must
/// call it, and every rank gets the same answer. Throws mgpu::Error, on every rank, for a
/// request that cannot work (nccl for CPU tensors, nccl without NCCL in the build, nccl with
/// two ranks on one GPU), with the fix in the message.
BackendChoice choose_backend(const std::string& requested, const Device& device);

/// True when this build has the nccl backend (CUDA toolkit with NCCL found at build time).
bool built_with_nccl();

/// How a group behaves. The defaults come from the environment.
struct GroupOptions {
  /// Seconds an op may take before the job is ended (env MGPU_DIST_TIMEOUT_S, default 300).
  double timeout_s = -1;  // < 0: use the default
  /// Compare every collective across ranks before running it (env MGPU_DIST_DEBUG=1).
  int debug = -1;  // < 0: use the default; 0 off; 1 on
  /// Print "backend: nccl (reason)" on rank 0.
  bool announce = true;
};
/// The timeout a new group gets by default: MGPU_DIST_TIMEOUT_S, or 300 s.
double default_timeout_s();
/// True when MGPU_DIST_DEBUG is set to something other than 0.
bool debug_from_env();

/// A new group over every rank of the world, with the backend chosen by choose_backend().
/// Collective: every rank creates its groups in the same order. Needs init().
std::shared_ptr<ProcessGroup> new_group(const std::string& backend, const Device& device,
                                        const GroupOptions& options = {});
/// A new group over the world ranks `ranks` (PyTorch's new_group(ranks)): they are sorted,
/// and group rank i is the i-th smallest. Collective over the whole world: every rank calls
/// it, member or not, with the same list, creating its groups in the same order. Returns
/// nullptr on a rank that is not in `ranks` (PyTorch's GroupMember.NON_GROUP_MEMBER). Throws
/// for an empty list, a rank outside [0, world_size()) or a rank listed twice. Needs init().
///
///     // 4 ranks as 2 x 2: tensor-parallel pairs {0,1} {2,3}, data-parallel pairs {0,2} {1,3}
///     std::shared_ptr<ProcessGroup> tp, dp;
///     for (int i = 0; i < 2; ++i) {
///       if (auto g = new_group({2 * i, 2 * i + 1}, "mpi", device)) tp = g;
///     }
///     for (int i = 0; i < 2; ++i) {
///       if (auto g = new_group({i, i + 2}, "mpi", device)) dp = g;
///     }
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks, const std::string& backend,
                                        const Device& device, const GroupOptions& options = {});

/// The job-wide default group, created once (c10d's init_process_group).
ProcessGroup& init_process_group(const std::string& backend, const Device& device,
                                 const GroupOptions& options = {});
/// The group created by init_process_group(); throws if there is none.
ProcessGroup& default_group();

}  // namespace mgpu::dist
