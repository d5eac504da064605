// Private: the mpi backend.
#pragma once

#include "mpi_include.h"

#include <atomic>
#include <memory>

#include "engine.h"
#include "group_base.h"
#include "staging.h"

namespace mgpu::dist::detail {

class MpiGroup final : public BackendGroup {
 public:
  /// A group over the ranks of `comm`, which it owns and frees (new_group makes it: a
  /// duplicate of MPI_COMM_WORLD or a split of it, so this group's messages never match
  /// another group's). `id`: its world-wide id (register_group_members).
  MpiGroup(const Device& device, const GroupOptions& options, MPI_Comm comm, int id);
  ~MpiGroup() override;

  std::string backend_name() const override { return "mpi"; }
  Device device() const override { return device_; }

  Work all_reduce(const Tensor& tensor, ReduceOp op) override;
  Work broadcast(const Tensor& tensor, int root) override;
  Work reduce(const Tensor& tensor, int root, ReduceOp op) override;
  Work all_gather(const Tensor& output, const Tensor& input) override;
  Work reduce_scatter(const Tensor& output, const Tensor& input, ReduceOp op) override;
  Work all_to_all(const Tensor& output, const Tensor& input,
                  const std::vector<std::int64_t>& output_split_sizes,
                  const std::vector<std::int64_t>& input_split_sizes) override;
  Work barrier() override;
  Work send(const Tensor& tensor, int dst, int tag) override;
  Work recv(const Tensor& tensor, int src, int tag) override;
  Work batch_isend_irecv(const std::vector<P2POp>& ops) override;
  void shutdown() override;
  std::int64_t collectives_issued() const override { return collective_seq_.load(); }

 private:
  Work collective(OpKind kind, const Tensor* t, ReduceOp r, int root, std::function<Poll()> start);
  Work p2p(const std::vector<P2POp>& ops, std::function<Poll()> start);

  Device device_;
  int id_;
  bool debug_;
  MPI_Comm comm_ = MPI_COMM_NULL;  // after construction, used by the comm thread only
  std::atomic<std::int64_t> collective_seq_{0};
  std::atomic<std::int64_t> p2p_seq_{0};
  PinnedPool pool_;
  std::unique_ptr<CommEngine> engine_;
  bool shut_down_ = false;
};

}  // namespace mgpu::dist::detail
