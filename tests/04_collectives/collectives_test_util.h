// Shared by lesson 04's graded ring tests: a ProcessGroup that passes send and recv through
// to a real mpi group and counts them, and refuses every collective - the ring must be
// built from point-to-point messages alone.
#pragma once

#include <algorithm>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/dist/dist.h"

namespace mgpu::testing {

class CountingGroup : public ForwardingGroup {
 public:
  explicit CountingGroup(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}

  int sends() const { return sends_; }
  int recvs() const { return recvs_; }
  std::int64_t bytes_sent() const { return bytes_sent_; }
  void reset() { sends_ = recvs_ = 0, bytes_sent_ = 0; }

  std::string backend_name() const override { return "counting(" + ForwardingGroup::backend_name() + ")"; }

  dist::Work send(const Tensor& t, int dst, int tag) override {
    ++sends_;
    bytes_sent_ += static_cast<std::int64_t>(t.nbytes());
    return ForwardingGroup::send(t, dst, tag);
  }
  dist::Work recv(const Tensor& t, int src, int tag) override {
    ++recvs_;
    return ForwardingGroup::recv(t, src, tag);
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
    return ForwardingGroup::batch_isend_irecv(ops);
  }

 protected:
  void on_collective(const std::string& op, const Tensor&) override {
    MGPU_FAIL("the ring must use only send and recv, but it called ", op);
  }

 private:
  std::atomic<int> sends_{0}, recvs_{0};
  std::atomic<std::int64_t> bytes_sent_{0};
};

/// The real group under the counting one: mpi on the CPU, quiet, and a short timeout so
/// that a ring whose sends and receives do not pair up fails in seconds, not minutes.
inline dist::ProcessGroup& lesson_group() {
  static std::shared_ptr<dist::ProcessGroup> g =
      dist::new_group("mpi", Device::cpu(), quiet_options(test_timeout_s(30)));
  return *g;
}

}  // namespace mgpu::testing
