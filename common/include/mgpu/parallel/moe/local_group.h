/// @file local_group.h
/// @brief LocalGroup: a ProcessGroup of one rank, on which every collective is a copy or
/// nothing. It makes a one-process Mixture of Experts the expert-parallel layer at P = 1:
/// the same dispatch, the same all-to-alls (here copies) and the same combine, with no
/// MPI needed (a program or test that never calls dist::init()).
#pragma once

#include <string>
#include <vector>

#include "mgpu/dist/process_group.h"

namespace mgpu::parallel::moe {

/// A group of one rank (rank 0 of size 1) for tensors on `device` (any device: a copy needs
/// no communicator). all_reduce, broadcast, reduce and barrier leave the tensor as it is;
/// all_gather, reduce_scatter and all_to_all copy input to output. Point-to-point messages
/// have no peer and throw. Every Work it returns is complete.
class LocalGroup : public dist::ProcessGroup {
 public:
  /// A group of one for tensors on `device`.
  explicit LocalGroup(const Device& device = Device::cpu());

  /// "local".
  std::string backend_name() const override { return "local"; }
  /// The device given at construction.
  Device device() const override { return device_; }

  dist::Work all_reduce(const Tensor& tensor, dist::ReduceOp op) override;
  dist::Work broadcast(const Tensor& tensor, int root) override;
  dist::Work reduce(const Tensor& tensor, int root, dist::ReduceOp op) override;
  dist::Work all_gather(const Tensor& output, const Tensor& input) override;
  dist::Work reduce_scatter(const Tensor& output, const Tensor& input,
                            dist::ReduceOp op) override;
  dist::Work all_to_all(const Tensor& output, const Tensor& input,
                        const std::vector<std::int64_t>& output_split_sizes,
                        const std::vector<std::int64_t>& input_split_sizes) override;
  dist::Work barrier() override;
  dist::Work send(const Tensor& tensor, int dst, int tag) override;
  dist::Work recv(const Tensor& tensor, int src, int tag) override;
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override;

 private:
  /// output <- input (same numel and dtype), for the collectives that move data.
  dist::Work copy(const char* op, const Tensor& output, const Tensor& input);

  Device device_;
};

}  // namespace mgpu::parallel::moe
