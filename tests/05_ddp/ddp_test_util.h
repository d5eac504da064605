// Helpers of lesson 05's tests: a toy model with traps, data, a process group that counts
// the collectives it is asked for, and a way for every rank to agree on a check's outcome.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "error_measures.h"
#include "forwarding_group.h"
#include "groups.h"
#include "mgpu/dist/dist.h"
#include "mgpu/optim/sgd.h"
#include "mgpu/nn/all.h"
#include "mgpu/ops.h"
#include "mgpu/tensor.h"

namespace ddp_test {

using namespace mgpu;  // Device, DType, Shape, Tensor, nn, dist

using mgpu::testing::all_ranks;
using mgpu::testing::group;
using mgpu::testing::max_abs_diff;

/// A model with DDP's classic traps, inputs [N, 6] -> logits [N, 3]:
///   fc1 (Linear 6->8) -> ReLU -> frozen (Linear 8->8, requires_grad off) -> head (Linear 8->3)
/// and, when `with_unused`, a Linear 8->3 "unused" registered between frozen and head that
/// forward never calls. Children are addressed by position, so clone() stays correct.
class TrapNet : public nn::Module {
 public:
  explicit TrapNet(bool with_unused) : with_unused_(with_unused) {
    register_module("fc1", std::make_shared<nn::Linear>(6, 8));
    register_module("act", std::make_shared<nn::ReLU>());
    register_module("frozen", std::make_shared<nn::Linear>(8, 8));
    if (with_unused) register_module("unused", std::make_shared<nn::Linear>(8, 3));
    register_module("head", std::make_shared<nn::Linear>(8, 3));
    for (nn::Parameter* p : child_at(2)->parameters()) p->set_requires_grad(false);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = child_at(0)->forward(x);
    h = child_at(1)->forward(h);
    h = child_at(2)->forward(h);
    return head().forward(h);
  }
  Tensor backward(const Tensor& g) override {
    Tensor h = head().backward(g);
    h = child_at(2)->backward(h);
    h = child_at(1)->backward(h);
    return child_at(0)->backward(h);
  }
  std::shared_ptr<nn::Module> clone() const override {
    return std::shared_ptr<nn::Module>(new TrapNet(*this));
  }
  std::string describe() const override { return "TrapNet"; }

 protected:
  TrapNet(const TrapNet&) = default;

 private:
  nn::Module& head() { return *child_at(with_unused_ ? 4 : 3); }
  bool with_unused_;
};

inline double bytes_to_mib(double bytes) { return bytes / (1024.0 * 1024.0); }

/// Two Linear 6->3 branches whose outputs are added: y = a(x) + b(x). Backward runs the
/// branches in the order `a_first` says, so ranks can see their gradients become ready in
/// different orders (as threads or data-dependent layers make them in real models).
class TwoBranch : public nn::Module {
 public:
  explicit TwoBranch(bool a_first) : a_first_(a_first) {
    register_module("a", std::make_shared<nn::Linear>(6, 3));
    register_module("b", std::make_shared<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    return mgpu::add(child_at(0)->forward(x), child_at(1)->forward(x));
  }
  Tensor backward(const Tensor& g) override {
    Tensor first = child_at(a_first_ ? 0 : 1)->backward(g);
    return mgpu::add(first, child_at(a_first_ ? 1 : 0)->backward(g));
  }
  std::shared_ptr<nn::Module> clone() const override {
    return std::shared_ptr<nn::Module>(new TwoBranch(*this));
  }
  std::string describe() const override { return "TwoBranch"; }

 protected:
  TwoBranch(const TwoBranch&) = default;

 private:
  bool a_first_;
};

/// The test data set: N samples of 6 features and labels in {0, 1, 2}, the same on every rank.
struct ToyData {
  std::vector<float> x;
  std::vector<std::int64_t> y;
  std::int64_t n = 0;
  explicit ToyData(std::int64_t count, std::uint64_t seed = 7) : n(count) {
    Tensor t = Tensor::empty({count, 6});
    mgpu::normal_(t, seed);
    x = t.to_vector<float>();
    for (std::int64_t i = 0; i < count; ++i) y.push_back((i * 5 + 1) % 3);
  }
  /// The rows `idx` as a batch.
  void batch(const std::vector<std::int64_t>& idx, Tensor& inputs, Tensor& labels) const {
    std::vector<float> xs;
    std::vector<std::int64_t> ys;
    for (std::int64_t i : idx) {
      xs.insert(xs.end(), x.begin() + i * 6, x.begin() + (i + 1) * 6);
      ys.push_back(y[static_cast<std::size_t>(i)]);
    }
    const auto b = static_cast<std::int64_t>(idx.size());
    inputs = Tensor::from_vector(xs, {b, 6});
    labels = Tensor::from_vector(ys, {b});
  }
};

/// A ProcessGroup that forwards every op to `inner` and counts them: tests see exactly which
/// collectives a DDP issued (and can check that no_sync issues none).
class CountingGroup : public mgpu::testing::ForwardingGroup {
 public:
  explicit CountingGroup(dist::ProcessGroup& inner) : ForwardingGroup(inner) {}
  void reset() {
    collectives = 0;
    all_reduce_numels.clear();
    all_reduce_inputs.clear();
  }

  int collectives = 0;
  std::vector<std::int64_t> all_reduce_numels;
  std::vector<std::vector<double>> all_reduce_inputs;  ///< each all_reduce's tensor, as issued

 protected:
  void on_collective(const std::string& op, const Tensor& t) override {
    ++collectives;
    if (op != "all_reduce") return;
    all_reduce_numels.push_back(t.numel());
    all_reduce_inputs.push_back(t.to(Device::cpu()).to_vector<double>());  // as sent
  }
};

}  // namespace ddp_test
