// A ProcessGroup for the graded ring tests: it passes send and recv through to a real mpi
// group and counts them, and refuses every collective - the ring must be built from
// point-to-point messages alone.
#pragma once

#include <atomic>
#include <memory>

#include "mgpu/dist/dist.h"

namespace mgpu::testing {

class CountingGroup : public dist::ProcessGroup {
 public:
  explicit CountingGroup(dist::ProcessGroup& inner)
      : ProcessGroup(inner.rank(), inner.size()), inner_(inner) {}

  int sends() const { return sends_; }
  int recvs() const { return recvs_; }
  std::int64_t bytes_sent() const { return bytes_sent_; }
  void reset() { sends_ = recvs_ = 0, bytes_sent_ = 0; }

  std::string backend_name() const override { return "counting(" + inner_.backend_name() + ")"; }
  Device device() const override { return inner_.device(); }

  dist::Work send(const Tensor& t, int dst, int tag) override {
    ++sends_;
    bytes_sent_ += static_cast<std::int64_t>(t.nbytes());
    return inner_.send(t, dst, tag);
  }
  dist::Work recv(const Tensor& t, int src, int tag) override {
    ++recvs_;
    return inner_.recv(t, src, tag);
  }
  dist::Work batch_isend_irecv(const std::vector<dist::P2POp>& ops) override {
    for (const auto& o : ops) {
      if (o.kind == dist::P2POp::Kind::send) {
        ++sends_;
        bytes_sent_ += static_cast<std::int64_t>(o.tensor.nbytes());
      } else {
        ++recvs_;
      }
    }
    return inner_.batch_isend_irecv(ops);
  }

  dist::Work all_reduce(const Tensor&, dist::ReduceOp) override { return refuse("all_reduce"); }
  dist::Work broadcast(const Tensor&, int) override { return refuse("broadcast"); }
  dist::Work reduce(const Tensor&, int, dist::ReduceOp) override { return refuse("reduce"); }
  dist::Work all_gather(const Tensor&, const Tensor&) override { return refuse("all_gather"); }
  dist::Work reduce_scatter(const Tensor&, const Tensor&, dist::ReduceOp) override {
    return refuse("reduce_scatter");
  }
  dist::Work barrier() override { return refuse("barrier"); }

 private:
  dist::Work refuse(const char* op) {
    MGPU_FAIL("the ring must use only send and recv, but it called ", op);
  }

  dist::ProcessGroup& inner_;
  std::atomic<int> sends_{0}, recvs_{0};
  std::atomic<std::int64_t> bytes_sent_{0};
};

/// The real group under the counting one: mpi on the CPU, quiet, and a short timeout so
/// that a ring whose sends and receives do not pair up fails in seconds, not minutes.
inline dist::ProcessGroup& lesson_group() {
  static std::shared_ptr<dist::ProcessGroup> g = [] {
    dist::GroupOptions o;
    o.announce = false;
    o.timeout_s = std::min(dist::default_timeout_s(), 30.0);
    return dist::new_group("mpi", Device::cpu(), o);
  }();
  return *g;
}

}  // namespace mgpu::testing
