// A ProcessGroup that passes every op through to a real group, for tests that watch or
// restrict what a piece of code asks of its group: a subclass sees each collective first.
#pragma once

#include <string>
#include <vector>

#include "mgpu/dist/dist.h"

namespace mgpu::testing {

/// Passes every op through to `inner`; each collective is shown to on_collective() first.
class ForwardingGroup : public dist::ProcessGroup {
 public:
  /// A group of the same rank and size as `inner`, which must outlive it.
  explicit ForwardingGroup(dist::ProcessGroup& inner)
      : dist::ProcessGroup(inner.rank(), inner.size()), inner_(inner) {}

  /// The inner group's backend.
  std::string backend_name() const override { return inner_.backend_name(); }
  /// The inner group's device.
  Device device() const override { return inner_.device(); }

  /// Shows "all_reduce" and `t`, then passes the op on.
  dist::Work all_reduce(const Tensor& t, dist::ReduceOp op) override {
    on_collective("all_reduce", t);
    return inner_.all_reduce(t, op);
  }
  /// Shows "broadcast" and `t`, then passes the op on.
  dist::Work broadcast(const Tensor& t, int root) override {
    on_collective("broadcast", t);
    return inner_.broadcast(t, root);
  }
  /// Shows "reduce" and `t`, then passes the op on.
  dist::Work reduce(const Tensor& t, int root, dist::ReduceOp op) override {
    on_collective("reduce", t);
    return inner_.reduce(t, root, op);
  }
  /// Shows "all_gather" and `out` (the tensor it writes), then passes the op on.
  dist::Work all_gather(const Tensor& out, const Tensor& in) override {
    on_collective("all_gather", out);
    return inner_.all_gather(out, in);
  }
  /// Shows "reduce_scatter" and `out` (the tensor it writes), then passes the op on.
  dist::Work reduce_scatter(const Tensor& out, const Tensor& in, dist::ReduceOp op) override {
    on_collective("reduce_scatter", out);
    return inner_.reduce_scatter(out, in, op);
  }
  /// Shows "all_to_all" and `out` (the tensor it writes), then passes the op on.
  dist::Work all_to_all(const Tensor& out, const Tensor& in, const std::vector<std::int64_t>& out_splits,
                        const std::vector<std::int64_t>& in_splits) override {
    on_collective("all_to_all", out);
    return inner_.all_to_all(out, in, out_splits, in_splits);
  }
  /// Shows "barrier" and an empty tensor, then passes the op on.
  dist::Work barrier() override {
    on_collective("barrier", Tensor());
    return inner_.barrier();
  }
  /// Passes the send on.
  dist::Work send(const Tensor& t, int dst, int tag) override { return inner_.send(t, dst, tag); }
  /// Passes the receive on.
  dist::Work recv(const Tensor& t, int src, int tag) override { return inner_.recv(t, src, tag); }
  /// Passes the batch of sends and receives on.
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override {
    return inner_.batch_isend_irecv(ops);
  }

 protected:
  /// Called before each collective is passed on, with the op's name and the tensor it
  /// writes (its only tensor, or the output; empty for a barrier). Throwing refuses the op.
  virtual void on_collective(const std::string& op, const Tensor& written) {
    (void)op;
    (void)written;
  }

 private:
  dist::ProcessGroup& inner_;
};

}  // namespace mgpu::testing
